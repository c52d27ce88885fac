"""deploy/ read as an orchestrator reads it, offline: every Kubernetes manifest validates
against the bundled Kubernetes schemas (kubernetes-validate, strict: unknown fields fail),
every pod template meets Pod Security "restricted" field by field, the labels, probes,
image, Secret keys and settings line up; the compose file gives each replica its own public
addresses and shares keys, artifacts and a persistent Redis; the Dockerfile installs the
pinned constraints under tini as a numeric user. That a real server answers the probes is
tests/integration/test_deploy.py."""

from __future__ import annotations

import copy
import re
import socket
import subprocess
import sys
import tomllib

import kubernetes_validate
import pytest
from packaging.requirements import Requirement

from service.app.config import unknown_env
from tests.deploy_util import (
    CONSTRAINTS,
    K8S,
    PROBES,
    ROOT,
    compose,
    configmap_env,
    dockerfile_instructions,
    image_env,
    k8s_documents,
    kustomization,
    one,
    pod_templates,
    resources,
    restricted_violations,
)

# The oldest Kubernetes minor the manifests are for (native sidecars aside, everything used
# is GA there) and the newest the validator bundles.
VERSIONS = ("1.30", kubernetes_validate.latest_version())
DOCS = [(name, doc) for name, doc in k8s_documents() if doc["kind"] != "Kustomization"]
# A Prometheus Operator CRD: the validator has no schema for it (shown below), so its
# required fields are checked by hand.
NOT_IN_SCHEMAS = {"ServiceMonitor"}
IN_SCHEMAS = [(n, d) for n, d in DOCS if d["kind"] not in NOT_IN_SCHEMAS]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
NAME_LABELS = {"app.kubernetes.io/name": "a2a-grpc-service", "app.kubernetes.io/instance": "a2a"}


@pytest.fixture
def offline(monkeypatch):
    """No network while validating: the schemas must come with the package."""

    def refuse(*args, **kwargs):
        raise AssertionError("the validator tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "name,doc",
    IN_SCHEMAS,
    ids=[f"{n}:{d['kind']}/{d['metadata']['name']}" for n, d in IN_SCHEMAS],
)
def test_every_manifest_validates_against_the_kubernetes_schemas(name, doc, version, offline):
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_crds_have_no_bundled_schema_so_they_are_checked_by_hand(version, offline):
    crds = [doc for _, doc in DOCS if doc["kind"] in NOT_IN_SCHEMAS]
    assert crds
    for doc in crds:
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_catches_a_misspelt_and_a_mistyped_field(offline):
    """So a green validation means something: strict mode refuses an unknown field."""
    deployment = copy.deepcopy(one("Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGett"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)
    deployment = copy.deepcopy(one("Deployment"))
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, VERSIONS[0], strict=True)


def test_the_servicemonitor_has_what_its_crd_requires_and_finds_the_metrics_port():
    monitor, service = one("ServiceMonitor"), one("Service")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", monitor["metadata"]["name"])
    selector = monitor["spec"]["selector"]["matchLabels"]  # required by the CRD
    assert selector.items() <= service["metadata"]["labels"].items()
    assert set(monitor["spec"]) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}
    service_ports = {p["name"] for p in service["spec"]["ports"]}
    assert monitor["spec"]["endpoints"]
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "scheme", "interval", "scrapeTimeout"}
        assert endpoint["port"] in service_ports
        assert endpoint["path"] == "/metrics" and endpoint["scheme"] in ("http", "https")
        assert re.fullmatch(r"\d+[smh]", endpoint["interval"])
    env = configmap_env(resources(), "a2a")
    assert env["A2A_METRICS_ENDPOINT"] == "true" and env["A2A_METRICS_PORT"]


def test_the_kustomization_lists_every_manifest_but_the_secret_example():
    kust = kustomization()
    assert kust["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert kust["kind"] == "Kustomization"
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == files - {"secret.example.yaml"}
    (image,) = kust["images"]
    assert image == {"name": "a2a-grpc-service", "newTag": VERSION}


@pytest.mark.parametrize("name,pod", list(pod_templates(resources())))
def test_every_pod_template_meets_pod_security_restricted(name, pod):
    assert restricted_violations(pod) == []
    psc = pod["securityContext"]
    assert isinstance(psc["runAsUser"], int) and psc["runAsUser"] > 0
    assert isinstance(psc["runAsGroup"], int) and psc["runAsGroup"] > 0
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        assert container["securityContext"]["readOnlyRootFilesystem"] is True


@pytest.mark.parametrize(
    "breach,rule",
    [
        (lambda p, c: c["securityContext"].pop("allowPrivilegeEscalation"), "allowPrivilege"),
        (lambda p, c: c["securityContext"]["capabilities"].update(drop=["NET_RAW"]), "ALL"),
        (lambda p, c: c["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]), "add"),
        (lambda p, c: c["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
        (lambda p, c: c["securityContext"].update(runAsUser=0), "runAsUser"),
        (
            lambda p, c: c["securityContext"].update(seccompProfile={"type": "Unconfined"}),
            "seccomp",
        ),
        (lambda p, c: c["securityContext"].update(privileged=True), "privileged"),
        (lambda p, c: p.update(hostNetwork=True), "hostNetwork"),
        (lambda p, c: p["volumes"].append({"name": "h", "hostPath": {"path": "/"}}), "hostPath"),
        (lambda p, c: c["ports"][0].update(hostPort=50051), "hostPort"),
    ],
)
def test_the_restricted_checker_sees_each_breach(breach, rule):
    """The checker is not vacuous: each rule, broken on a copy, is reported."""
    pod = copy.deepcopy(one("Deployment")["spec"]["template"]["spec"])
    breach(pod, pod["containers"][0])
    assert any(rule in line for line in restricted_violations(pod)), restricted_violations(pod)


def test_every_resource_has_the_standard_labels_and_selectors_find_the_pods():
    for doc in resources():
        labels = doc["metadata"]["labels"]
        assert NAME_LABELS.items() <= labels.items(), doc["metadata"]["name"]
        assert labels["app.kubernetes.io/part-of"] == "a2a"
        assert labels["app.kubernetes.io/managed-by"] == "kustomize"
    deployment = one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == NAME_LABELS
    assert NAME_LABELS.items() <= pod_labels.items()
    assert pod_labels["app.kubernetes.io/version"] == VERSION
    assert one("Service")["spec"]["selector"] == NAME_LABELS
    assert one("PodDisruptionBudget")["spec"]["selector"]["matchLabels"] == NAME_LABELS
    assert one("PodDisruptionBudget")["spec"]["minAvailable"] < deployment["spec"]["replicas"]
    hpa = one("HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "a2a"}
    assert hpa["minReplicas"] >= 2  # the PDB's minAvailable 1 then still allows a drain


def test_the_container_image_is_pinned_and_sized():
    (container,) = one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"a2a-grpc-service:{VERSION}"
    assert not container["image"].endswith(":latest")
    assert container["imagePullPolicy"] == "IfNotPresent"
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= container["resources"][kind].keys()


def test_probes_use_the_documented_paths_on_declared_ports():
    spec = one("Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = configmap_env(resources(), "a2a")
    assert ports == {
        "grpc": int(env["A2A_GRPC_PORT"]),
        "http": int(env["A2A_HTTP_PORT"]),
        "probes": int(env["A2A_PROBE_PORT"]),
        "metrics": int(env["A2A_METRICS_PORT"]),
    }
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert container["startupProbe"]["httpGet"]["path"] == "/health/live"
    for probe in PROBES:
        assert container[probe]["httpGet"]["port"] in ports
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 60  # migrations
    drain = float(env["A2A_DRAIN_SECONDS"])
    assert spec["terminationGracePeriodSeconds"] >= drain + 8  # the shutdown bound
    # The probe listener is bound to the pod IP the kubelet probes, never 0.0.0.0.
    probe_host = [e for e in container["env"] if e["name"] == "A2A_PROBE_HOST"]
    assert probe_host == [{"name": "A2A_PROBE_HOST", "value": "$(POD_IP)"}]


def test_writable_paths_are_volumes_and_artifacts_are_shared():
    spec = one("Deployment")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    env = configmap_env(resources(), "a2a")
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert {env["A2A_DATA_DIR"], env["A2A_FILE_ARTIFACT_DIR"], "/tmp"} <= mounts.keys()
    files = volumes[mounts[env["A2A_FILE_ARTIFACT_DIR"]]]
    pvc = one("PersistentVolumeClaim")
    assert files["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_secrets_come_from_the_secret_and_every_key_is_in_the_example():
    (_, secret) = [(n, d) for n, d in k8s_documents() if d["kind"] == "Secret"][0]
    (container,) = one("Deployment")["spec"]["template"]["spec"]["containers"]
    from_secret = {
        e["name"]: e["valueFrom"]["secretKeyRef"]
        for e in container["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert {
        "A2A_STORE",
        "A2A_BUS",
        "A2A_PUSH_REDIS_URL",
        "A2A_PUSH_SECRET_KEYS",
        "A2A_AUTH_BEARER_TOKENS",
    } <= from_secret.keys()
    for ref in from_secret.values():
        assert ref["name"] == secret["metadata"]["name"]
        assert ref["key"] in secret["stringData"]
    assert not from_secret.keys() & configmap_env(resources(), "a2a").keys()


def test_every_service_setting_named_is_a_real_one():
    """A misspelt A2A_ name is only a startup warning: here it fails."""
    (container,) = one("Deployment")["spec"]["template"]["spec"]["containers"]
    names = set(configmap_env(resources(), "a2a")) | {e["name"] for e in container["env"]}
    for service in compose()["services"].values():
        names |= set(service.get("environment", {}))
    names |= set(image_env())
    assert unknown_env(dict.fromkeys(names, "")) == []
    assert {n for n in names if n.startswith("OTEL_")} <= {
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
    }


def replicas() -> dict[str, dict]:
    return {k: v for k, v in compose()["services"].items() if k.startswith("a2a-")}


def test_compose_gives_each_replica_its_own_public_addresses():
    seen_urls, seen_grpc = set(), set()
    for name, service in replicas().items():
        env = service["environment"]
        grpc_host, http_host = (p.split(":")[0] for p in service["ports"])
        assert env["A2A_PUBLIC_URL"] == f"http://localhost:{http_host}", name
        assert env["A2A_GRPC_PUBLIC_ADDRESS"] == f"localhost:{grpc_host}", name
        seen_urls.add(env["A2A_PUBLIC_URL"])
        seen_grpc.add(env["A2A_GRPC_PUBLIC_ADDRESS"])
    assert len(seen_urls) == len(seen_grpc) == len(replicas()) == 2


def test_compose_shares_keys_and_artifacts_and_keeps_redis_on_disk():
    services = compose()["services"]
    keys = {s["environment"]["A2A_PUSH_SECRET_KEYS"] for s in replicas().values()}
    assert len(keys) == 1 and keys.pop().startswith("${A2A_PUSH_SECRET_KEYS:?")
    artifact_dirs = {s["environment"]["A2A_FILE_ARTIFACT_DIR"] for s in replicas().values()}
    assert len(artifact_dirs) == 1
    (artifact_dir,) = artifact_dirs
    data_volumes = set()
    for service in replicas().values():
        mounts = dict(reversed(v.split(":")) for v in service["volumes"])
        assert mounts[artifact_dir] == "files"
        data_volumes.add(mounts["/data"])
        assert service["environment"]["A2A_STORE"].startswith("postgresql://")
        assert service["environment"]["A2A_PUSH_QUEUE"] == "redis-streams"
    assert len(data_volumes) == 2  # one data directory (and its lock) per replica
    command = services["redis"]["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    assert "postgres" in services and "pgdata" in compose()["volumes"]
    assert "files" in compose()["volumes"]


def test_the_dockerfile_installs_the_constraints_under_tini_as_a_numeric_user():
    instructions = dockerfile_instructions()
    words = [w for w, _ in instructions]
    (user,) = [rest for w, rest in instructions if w == "USER"]
    assert re.fullmatch(r"\d+(:\d+)?", user) and not user.startswith("0")
    (entry,) = [rest for w, rest in instructions if w == "ENTRYPOINT"]
    assert entry.startswith('["/usr/bin/tini", "--"'), entry
    assert "HEALTHCHECK" in words
    runs = [rest for w, rest in instructions if w == "RUN"]
    assert any("apt-get install" in r and " tini" in r for r in runs)
    pips = [r for r in runs if "pip install" in r]
    assert pips and all(">=" not in r and "~=" not in r for r in pips)
    assert any("-r constraints.txt" in r and "--no-deps" in r for r in pips)
    # The project itself goes in without resolving anything, after the pinned packages.
    assert any(r.rstrip().endswith("&& pip check") and "--no-deps" in r for r in pips)
    assert words.index("USER") > max(i for i, w in enumerate(words) if w == "RUN")
    assert image_env()["A2A_DATA_DIR"] == "/data"
    assert not [r for w, r in instructions if w == "FROM" and r.endswith(":latest")]


def constraint_pins() -> dict[str, str]:
    pins = {}
    for line in CONSTRAINTS.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[A-Za-z0-9.+!-]+", version), line
            pins[name] = version
    return pins


def test_the_constraints_pin_exactly_what_pip_install_dot_needs():
    result = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "constraints.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    generated = [line.split("==")[0] for line in result.stdout.splitlines() if "==" in line]
    pins = constraint_pins()
    assert sorted(pins) == sorted(generated), (
        "regenerate deploy/constraints.txt (docs/deployment.md)"
    )
    for line in PYPROJECT["project"]["dependencies"]:
        req = Requirement(line)
        canonical = re.sub(r"[-_.]+", "-", req.name).lower()
        assert req.specifier.contains(pins[canonical], prereleases=True), (line, pins[canonical])
    (backend,) = PYPROJECT["build-system"]["requires"]
    assert Requirement(backend).specifier.contains(pins["setuptools"])
