"""Reading deploy/ as an orchestrator would: the Kubernetes manifests, the compose file and
the Dockerfile, the environment each gives the service, and the Pod Security "restricted"
rules checked field by field (no container engine or cluster runs where the tests do)."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from tests.process import ROOT

DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
CONSTRAINTS = DEPLOY / "constraints.txt"
PROBES = ("startupProbe", "livenessProbe", "readinessProbe")

Doc = dict[str, Any]


def k8s_documents() -> list[tuple[str, Doc]]:
    """(file name, resource) of every YAML document under deploy/k8s, the kustomization too."""
    found = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((path.name, doc))
    return found


def kustomization() -> Doc:
    doc: Doc = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return doc


def resources() -> list[Doc]:
    """The resources the kustomization base applies."""
    out: list[Doc] = []
    for name in kustomization()["resources"]:
        out.extend(d for d in yaml.safe_load_all((K8S / name).read_text()) if d)
    return out


def one(kind: str, docs: list[Doc] | None = None) -> Doc:
    matches = [d for d in (resources() if docs is None else docs) if d["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, found {len(matches)}"
    return matches[0]


def pod_templates(docs: list[Doc]) -> Iterator[tuple[str, Doc]]:
    """(resource name, pod spec) of every workload's pod template."""
    for doc in docs:
        spec = doc.get("spec", {})
        if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
            yield doc["metadata"]["name"], spec["template"]["spec"]
        elif doc["kind"] == "CronJob":
            yield doc["metadata"]["name"], spec["jobTemplate"]["spec"]["template"]["spec"]
        elif doc["kind"] == "Pod":
            yield doc["metadata"]["name"], spec


# Pod Security Standards, "restricted" profile (Kubernetes 1.30), baseline rules included.
RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def restricted_violations(pod: Doc) -> list[str]:
    """Every rule of the "restricted" profile this pod spec breaks, one line each."""
    bad: list[str] = []
    psc = pod.get("securityContext") or {}
    containers = [
        *(("containers", c) for c in pod.get("containers", [])),
        *(("initContainers", c) for c in pod.get("initContainers", [])),
        *(("ephemeralContainers", c) for c in pod.get("ephemeralContainers", [])),
    ]
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            bad.append(f"{field} is true")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        bad.append("pod windowsOptions.hostProcess is true")
    for volume in pod.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            bad.append(f"volume {volume['name']}: type {sorted(kinds)} not allowed")
    for sysctl in psc.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            bad.append(f"sysctl {sysctl['name']} not allowed")
    if (psc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        bad.append("pod appArmorProfile is Unconfined")
    if (psc.get("seLinuxOptions") or {}).get("type", "") not in SELINUX_TYPES:
        bad.append("pod seLinuxOptions.type not allowed")
    if any(k in (psc.get("seLinuxOptions") or {}) for k in ("user", "role")):
        bad.append("pod seLinuxOptions sets user or role")
    if psc.get("runAsUser") == 0:
        bad.append("pod runAsUser is 0")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        bad.append(f"pod seccompProfile is {pod_seccomp}")
    for where, c in containers:
        name = f"{where}[{c['name']}]"
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            bad.append(f"{name}: privileged")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            bad.append(f"{name}: windowsOptions.hostProcess is true")
        caps = sc.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []):
            bad.append(f"{name}: capabilities.drop does not hold ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append(f"{name}: capabilities.add beyond NET_BIND_SERVICE")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                bad.append(f"{name}: hostPort {port['hostPort']}")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            bad.append(f"{name}: appArmorProfile is Unconfined")
        if (sc.get("seLinuxOptions") or {}).get("type", "") not in SELINUX_TYPES:
            bad.append(f"{name}: seLinuxOptions.type not allowed")
        if sc.get("procMount", "Default") != "Default":
            bad.append(f"{name}: procMount is {sc['procMount']}")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{name}: allowPrivilegeEscalation is not false")
        non_root = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if non_root is not True:
            bad.append(f"{name}: runAsNonRoot is not true (container or pod)")
        if sc.get("runAsUser") == 0:
            bad.append(f"{name}: runAsUser is 0")
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{name}: seccompProfile is {seccomp} (container or pod)")
    return bad


def configmap_env(docs: list[Doc], name: str) -> dict[str, str]:
    data = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name]
    assert data, f"no ConfigMap {name}"
    return {k: str(v) for k, v in data[0].get("data", {}).items()}


def container_env(
    docs: list[Doc],
    container: Doc,
    *,
    secrets: Mapping[str, str],
    fields: Mapping[str, str],
) -> dict[str, str]:
    """The environment the kubelet gives `container`: envFrom ConfigMaps, then `env` in
    order, `$(NAME)` expanded from what is defined before; `secrets` answers
    secretKeyRef keys, `fields` fieldRef paths."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(configmap_env(docs, source["configMapRef"]["name"]))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), item["value"]
            )
            continue
        ref = item["valueFrom"]
        if "secretKeyRef" in ref:
            env[item["name"]] = secrets[ref["secretKeyRef"]["key"]]
        elif "fieldRef" in ref:
            env[item["name"]] = fields[ref["fieldRef"]["fieldPath"]]
        elif "configMapKeyRef" in ref:
            key = ref["configMapKeyRef"]
            env[item["name"]] = configmap_env(docs, key["name"])[key["key"]]
        else:
            raise AssertionError(f"unhandled env source {ref}")
    return env


def compose() -> Doc:
    doc: Doc = yaml.safe_load(COMPOSE.read_text())
    return doc


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's `${NAME}`, `${NAME:-default}` and `${NAME:?error}`."""

    def one_var(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2) or "", m.group(3) or ""
        if env.get(name):
            return env[name]
        if op == ":?":
            raise KeyError(f"{name}: {arg}")
        return arg if op == ":-" else ""

    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", one_var, value)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of deploy/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def image_env() -> dict[str, str]:
    """The ENV of the image (`ENV A=1 B=2` form)."""
    env: dict[str, str] = {}
    for word, rest in dockerfile_instructions():
        if word == "ENV":
            for pair in shlex.split(rest):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def healthcheck_command() -> list[str]:
    """The exec form of the image's HEALTHCHECK CMD."""
    (rest,) = [rest for word, rest in dockerfile_instructions() if word == "HEALTHCHECK"]
    command: list[str] = json.loads(rest.split(" CMD ", 1)[1])
    return command


def clean_environ() -> dict[str, str]:
    """This process's environment without any service or OpenTelemetry setting."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("A2A_", "OTEL_"))}
