"""The wire contract: proto/a2a.proto, gen/, buf lint/breaking and the service surface.

proto/a2a.proto must compile to exactly the descriptor a2a-sdk 1.3.0 ships, so
that `gen.a2a_pb2` and `a2a.types.a2a_pb2` can share one process; only
comments may change. buf runs on an image compiled by `python proto/codegen.py
image` because the google/api imports come from the installed
googleapis-common-protos, not from a registry (see buf.yaml).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from google.protobuf import descriptor_pb2, text_format

ROOT = pathlib.Path(__file__).resolve().parents[2]
CODEGEN = ROOT / "proto" / "codegen.py"  # build tooling beside the contract, run as a script


def _load_codegen():
    spec = importlib.util.spec_from_file_location("codegen", CODEGEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


codegen = _load_codegen()
BUF = ROOT / ".tools" / "node_modules" / ".bin" / "buf"
PROTO_FILE = "a2a.proto"

EXPECTED_RPCS = {
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "GetExtendedAgentCard",
    "DeleteTaskPushNotificationConfig",
}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def _run(args: list[str | os.PathLike[str]], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


def _text_diff(expected: descriptor_pb2.FileDescriptorProto, actual, names=("a", "b")) -> str:
    return "\n".join(
        difflib.unified_diff(
            text_format.MessageToString(expected).splitlines(),
            text_format.MessageToString(actual).splitlines(),
            *names,
            lineterm="",
        )
    )


def _normalised(proto: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """Re-parse with the google.api extensions registered.

    A FileDescriptorProto parsed before google.api.annotations_pb2 was imported
    keeps `(google.api.http)` etc. as unknown fields, which compare unequal to
    (and print differently from) the same options parsed as extensions.
    """
    import google.api.annotations_pb2  # noqa: F401
    import google.api.client_pb2  # noqa: F401
    import google.api.field_behavior_pb2  # noqa: F401

    return descriptor_pb2.FileDescriptorProto.FromString(proto.SerializeToString())


def _sdk_file_proto() -> descriptor_pb2.FileDescriptorProto:
    from a2a.types import a2a_pb2 as sdk_pb2

    proto = descriptor_pb2.FileDescriptorProto()
    sdk_pb2.DESCRIPTOR.CopyToProto(proto)
    return _normalised(proto)


def _sdk_descriptor_set() -> descriptor_pb2.FileDescriptorSet:
    """a2a-sdk 1.3.0's a2a.proto with its imports, dependencies first."""
    from a2a.types import a2a_pb2 as sdk_pb2

    fds = descriptor_pb2.FileDescriptorSet()
    seen: set[str] = set()

    def add(file_descriptor) -> None:
        if file_descriptor.name in seen:
            return
        seen.add(file_descriptor.name)
        for dependency in file_descriptor.dependencies:
            add(dependency)
        file_descriptor.CopyToProto(fds.file.add())

    add(sdk_pb2.DESCRIPTOR)
    return fds


@pytest.fixture(scope="module")
def buf() -> pathlib.Path:
    if not (BUF.is_file() and os.access(BUF, os.X_OK)):
        pytest.fail(f"buf CLI not found at {BUF.relative_to(ROOT)}: run `make tools`")
    return BUF


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> pathlib.Path:
    """The contract as `make lint` builds it: imports plus source info."""
    path = tmp_path_factory.mktemp("image") / "a2a.binpb"
    result = _run([sys.executable, str(CODEGEN), "image", path])
    assert result.returncode == 0, result.stderr
    return path


# --- descriptor -------------------------------------------------------------


def test_compiled_descriptor_equals_a2a_sdk():
    compiled = _normalised(next(f for f in codegen.descriptor_set().file if f.name == PROTO_FILE))
    sdk = _sdk_file_proto()
    assert compiled == sdk, (
        "proto/a2a.proto no longer compiles to a2a-sdk 1.3.0's descriptor "
        "(only comments may change):\n" + _text_diff(sdk, compiled, ("a2a-sdk", "proto/a2a.proto"))
    )
    # The generated module embeds the same bytes the SDK does.
    from a2a.types import a2a_pb2 as sdk_pb2

    from gen import a2a_pb2 as gen_pb2

    assert gen_pb2.DESCRIPTOR.serialized_pb == sdk_pb2.DESCRIPTOR.serialized_pb


def test_code_generation_ignores_comments():
    """Comments live only in source info, which never reaches gen/."""
    assert all(not f.HasField("source_code_info") for f in codegen.descriptor_set().file)
    with_info = codegen.descriptor_set(include_source_info=True)
    ours = next(f for f in with_info.file if f.name == PROTO_FILE)
    assert ours.source_code_info.location, "image lost its source info"
    ours.ClearField("source_code_info")
    assert _normalised(ours) == _sdk_file_proto()


# --- one process, both modules ---------------------------------------------

_INTEROP_SCRIPT = textwrap.dedent(
    """
    import sys

    if sys.argv[1] == "gen-first":
        from gen import a2a_pb2 as g
        import a2a.types as t
    else:
        import a2a.types as t
        from gen import a2a_pb2 as g
    from gen import a2a_pb2_grpc  # noqa: F401  (imports gen.a2a_pb2 again)

    # Built with gen, accepted by the SDK.
    msg = g.Message(message_id="m-1", role=g.ROLE_USER, parts=[g.Part(text="hi")])
    req = t.SendMessageRequest(message=msg)
    assert req.message.parts[0].text == "hi"
    wire = g.SendMessageRequest(message=msg).SerializeToString()
    assert t.SendMessageRequest.FromString(wire) == req

    # Built with the SDK, accepted by gen.
    task = t.Task(id="t-1", status=t.TaskStatus(state=t.TaskState.TASK_STATE_WORKING))
    resp = g.SendMessageResponse(task=task)
    assert resp.WhichOneof("payload") == "task" and resp.task.id == "t-1"
    copy = g.Task()
    copy.CopyFrom(task)
    assert copy == task
    event = g.StreamResponse()
    event.status_update.status.CopyFrom(task.status)
    assert event.status_update.status.state == g.TASK_STATE_WORKING
    print("interop ok")
    """
)


@pytest.mark.parametrize("order", ["gen-first", "sdk-first"])
def test_gen_and_a2a_sdk_coexist_in_one_process(order):
    result = _run([sys.executable, "-c", _INTEROP_SCRIPT, order])
    assert result.returncode == 0, f"{order}:\n{result.stdout}\n{result.stderr}"
    assert "interop ok" in result.stdout


# --- gen/ is fresh ----------------------------------------------------------


def _files(directory: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_committed_gen_is_not_stale(tmp_path):
    out = tmp_path / "gen"
    result = _run([sys.executable, str(CODEGEN), out])
    assert result.returncode == 0, result.stderr
    fresh, committed = _files(out), _files(ROOT / "gen")
    assert sorted(fresh) == sorted(committed), (
        f"gen/ has a different file list than a fresh generation "
        f"(fresh {sorted(fresh)}, committed {sorted(committed)}): run `make gen`"
    )
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"gen/ is stale ({', '.join(stale)} differ): run `make gen`"


# --- buf --------------------------------------------------------------------


def test_buf_yaml_fetches_nothing_remote():
    text = (ROOT / "buf.yaml").read_text()
    assert "version: v2" in text
    assert not any(line.startswith("deps:") for line in text.splitlines())


def test_buf_lint_passes(buf, image):
    result = _run([buf, "lint", image, "--path", PROTO_FILE])
    assert result.returncode == 0, f"buf lint failed:\n{result.stdout}{result.stderr}"


def test_buf_lint_passes_for_the_envelope_proto(buf, image):
    """Our own proto/jsonrpc_envelope.proto (the gRPC JSON-RPC envelope) is lint-clean too;
    its one exception (the service name without "Service") is a comment in the file."""
    result = _run([buf, "lint", image, "--path", codegen.ENVELOPE_PROTO_FILE])
    assert result.returncode == 0, f"buf lint failed:\n{result.stdout}{result.stderr}"


def test_buf_lint_requires_comments(buf, image, tmp_path):
    """Control: buf.yaml's COMMENTS rules are live, so the pass above means something."""
    fds = descriptor_pb2.FileDescriptorSet.FromString(image.read_bytes())
    ours = next(f for f in fds.file if f.name == PROTO_FILE)
    task_index = [m.name for m in ours.message_type].index("Task")
    path = [descriptor_pb2.FileDescriptorProto.MESSAGE_TYPE_FIELD_NUMBER, task_index]
    location = next(loc for loc in ours.source_code_info.location if list(loc.path) == path)
    location.ClearField("leading_comments")
    stripped = tmp_path / "stripped.binpb"
    stripped.write_bytes(fds.SerializeToString())

    result = _run([buf, "lint", stripped, "--path", PROTO_FILE])
    assert result.returncode != 0
    assert 'Message "Task" should have a non-empty comment' in result.stdout, result.stdout


def _breaking(buf, against: descriptor_pb2.FileDescriptorSet, image, tmp_path):
    against_path = tmp_path / "against.binpb"
    against_path.write_bytes(against.SerializeToString())
    # --path/--exclude-imports: judge a2a.proto only; the google/* imports are
    # whatever the installed packages ship and are not our contract.
    return _run(
        [
            buf,
            "breaking",
            image,
            "--against",
            against_path,
            "--path",
            PROTO_FILE,
            "--exclude-imports",
        ]
    )


def test_buf_breaking_against_a2a_sdk(buf, image, tmp_path):
    result = _breaking(buf, _sdk_descriptor_set(), image, tmp_path)
    assert result.returncode == 0, (
        f"breaking change against a2a-sdk 1.3.0:\n{result.stdout}{result.stderr}"
    )


def test_buf_breaking_detects_a_change(buf, image, tmp_path):
    """Control: the check compares a2a.proto for real (a field we lack is a break)."""
    against = _sdk_descriptor_set()
    sdk = next(f for f in against.file if f.name == PROTO_FILE)
    task = next(m for m in sdk.message_type if m.name == "Task")
    task.field.add(
        name="extra_field",
        number=99,
        type=task.field[0].type,
        label=task.field[0].label,
        json_name="extraField",
    )
    result = _breaking(buf, against, image, tmp_path)
    assert result.returncode != 0
    assert "extra_field" in result.stdout, result.stdout


# --- service surface --------------------------------------------------------


def test_service_has_exactly_the_a2a_rpcs():
    from gen import a2a_pb2, a2a_pb2_grpc

    service = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"]
    assert service.full_name == "lf.a2a.v1.A2AService"
    assert {m.name for m in service.methods} == EXPECTED_RPCS
    assert len(service.methods) == 11
    streaming = {m.name for m in service.methods if m.server_streaming}
    assert streaming == {"SendStreamingMessage", "SubscribeToTask"}
    assert not any(m.client_streaming for m in service.methods)
    servicer = a2a_pb2_grpc.A2AServiceServicer
    assert EXPECTED_RPCS <= {name for name in vars(servicer) if not name.startswith("_")}
