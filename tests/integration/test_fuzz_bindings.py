"""Fuzzing every binding with malformed requests (hypothesis).

One server (echo agent, in-memory store, no push) takes thousands of generated
requests on gRPC, JSON-RPC and REST: random bytes, random JSON, well-formed
envelopes around hostile messages (oversized or odd parts, bad media types,
file:// URLs outside the workspace, symlinks, remote URLs, bad working
directories, junk ids and metadata). For each one:

- no 5xx (HTTP) and no UNKNOWN / INTERNAL / DATA_LOSS / UNAVAILABLE (gRPC);
- an answer within the timeout (no hang);
- a refused request stores nothing;
- no error message echoes a local path of the server or a traceback.

Afterwards the server still answers its health checks and a valid request.
`A2A_FUZZ_EXAMPLES` sets the examples per binding (default 1000).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pathlib

import grpc
import httpx
import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gen import a2a_pb2 as pb
from service.grpc_binding import SERVICE

EXAMPLES = int(os.environ.get("A2A_FUZZ_EXAMPLES", "1000"))
TIMEOUT = 10.0
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
HOSTILE_BODIES = [
    b"[" * 50_000,
    b'{"a":' * 20_000,
    b"\xff\xfe{}",
    b"1e999999",
    b'{"message": 5}',
    b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"parts": '
    + b"[" * 5000
    + b"]" * 5000
    + b"}}}",
]
BAD_GRPC = {
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
METHODS = [m.name for m in SERVICE.methods]
STREAMING = {m.name for m in SERVICE.methods if m.server_streaming}


# ---------------------------------------------------------------- strategies

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64)
    | st.floats(allow_nan=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
ids = st.sampled_from(
    ["t-1", "ctx-1", "a" * 128, "a" * 129, "", "../x", "ü", "x y", "0"]
) | st.text(max_size=20)
media_types = st.sampled_from(
    [
        "text/plain",
        "application/json",
        "image/png",
        "image/svg+xml",
        "audio/ogg",
        "video/mp4",
        "application/octet-stream",
        "text/plain; charset=utf-16",
        "",
        "not a type",
        "text/",
        "*/*",
        "TEXT/PLAIN",
        "x" * 300,
        "text/plain\r\nX-Injected: 1",
    ]
) | st.text(max_size=30)


def url_strategy(paths: dict[str, str]) -> st.SearchStrategy[str]:
    local = [
        paths["file"],
        paths["outside_file"],
        paths["link_file"],
        paths["project"],
        "/etc/passwd",
        "/dev/zero",
        "/proc/self/environ",
        f"{paths['project']}/../../outside/secret.txt",
        f"{paths['project']}/missing.txt",
    ]
    fixed = ["file://" + p for p in local] + [
        "file://localhost" + paths["file"],
        "file://evil.example/etc/passwd",
        "file:relative.txt",
        "file:///tmp/%00x",
        "file:///tmp/%ff%fe",
        f"file://{paths['file']}?q=1#f",
        "http://169.254.169.254/latest/meta-data/",
        "https://example.com/a.txt",
        "http://[::1",
        "ftp://example.com/x",
        "data:text/plain,hi",
        "javascript:alert(1)",
        "",
        "x" * 9000,
        "https://user:pass@example.com/",
        "gopher://localhost:6379/_FLUSHALL",
    ]
    return (
        st.sampled_from(fixed)
        | st.text(max_size=40)
        | st.builds(lambda p: "file://" + p, st.text(max_size=30))
    )


def part_strategy(paths: dict[str, str]) -> st.SearchStrategy[dict]:
    content = st.one_of(
        st.builds(
            lambda t: {"text": t},
            st.text(max_size=60) | st.sampled_from(["x" * 70_000, "é" * 40_000]),
        ),
        st.builds(
            lambda b: {"raw": base64.b64encode(b).decode()},
            st.binary(max_size=64) | st.sampled_from([b"\0" * 300_000, b"\xff\xfe"]),
        ),
        st.builds(lambda r: {"raw": r}, st.text(max_size=12)),  # not base64
        st.builds(lambda u: {"url": u}, url_strategy(paths)),
        st.builds(lambda d: {"data": d}, json_values),
        st.just({}),  # no content
        st.builds(
            lambda t, u: {"text": t, "url": u}, st.text(max_size=5), url_strategy(paths)
        ),  # two contents
    )
    extras = st.fixed_dictionaries(
        {},
        optional={
            "mediaType": media_types,
            "filename": st.text(max_size=20) | st.sampled_from(["../../etc/passwd", "a.png"]),
            "metadata": json_values,
        },
    )
    return st.builds(lambda c, e: {**c, **e}, content, extras)


def message_strategy(paths: dict[str, str]) -> st.SearchStrategy[dict]:
    cwd = st.sampled_from(
        [
            paths["project"],
            paths["other"],
            paths["outside"],
            paths["link_dir"],
            paths["file"],
            "relative/dir",
            "/",
            "/etc",
            "",
            "/tmp/\x00",
            f"{paths['project']}/..",
        ]
    ) | st.text(max_size=20)
    metadata = st.one_of(
        json_values,
        st.builds(lambda c: {"a2a_service": {"cwd": c}}, cwd | json_values),
        st.builds(lambda v: {"a2a_service": v}, json_values),
    )
    return st.fixed_dictionaries(
        {
            "messageId": ids,
            "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", "ROLE_UNSPECIFIED", "nope", 7]),
            "parts": st.lists(part_strategy(paths), max_size=4) | st.just([{"text": "x"}] * 150),
        },
        optional={
            "contextId": ids,
            "taskId": ids,
            "metadata": metadata,
            "referenceTaskIds": st.lists(ids, max_size=3),
            "extensions": st.lists(st.text(max_size=10), max_size=2),
        },
    )


def params_strategy(paths: dict[str, str]) -> st.SearchStrategy:
    config = st.fixed_dictionaries(
        {},
        optional={
            "historyLength": st.integers(-5, 2**40) | st.text(max_size=4),
            "returnImmediately": st.booleans() | json_scalars,
            "acceptedOutputModes": st.lists(media_types, max_size=3),
        },
    )
    send = st.fixed_dictionaries(
        {"message": message_strategy(paths)},
        optional={"configuration": config, "tenant": ids, "metadata": json_values},
    )
    other = st.fixed_dictionaries(
        {},
        optional={
            "id": ids,
            "taskId": ids,
            "tenant": ids,
            "pageSize": json_scalars,
            "pageToken": ids,
            "historyLength": json_scalars,
            "status": json_scalars,
            "url": url_strategy(paths),
            "contextId": ids,
        },
    )
    return st.one_of(send, other, json_values)


def body_strategy(paths: dict[str, str]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.builds(lambda p: json.dumps(p).encode(), params_strategy(paths)),
        st.binary(max_size=200),
        st.sampled_from(
            [
                b"",
                b"{",
                b"[" * 50_000,
                b'{"a":' * 20_000,
                b"\xff\xfe{}",
                b"null",
                b"1e999999",
                b'{"message": {"parts": [{"text": "' + b"x" * 200_000 + b'"}]}}',
            ]
        ),
    )


def jsonrpc_strategy(paths: dict[str, str]) -> st.SearchStrategy[bytes]:
    envelope = st.fixed_dictionaries(
        {
            "jsonrpc": st.sampled_from(["2.0", "2.0", "1.0", 2]),
            "id": st.integers() | st.text(max_size=8) | json_values,
            "method": st.sampled_from(METHODS) | st.text(max_size=20),
        },
        optional={"params": params_strategy(paths)},
    )
    return st.one_of(st.builds(lambda e: json.dumps(e).encode(), envelope), body_strategy(paths))


CONTENT_TYPES = st.sampled_from(
    [
        "application/json",
        "application/a2a+json",
        "application/json; charset=latin-1",
        "text/plain",
        None,
        "multipart/form-data; boundary=x",
        "application/json; x",
    ]
)
VERSIONS = st.sampled_from(["1.0", "1.0", "0.3", "", "2.0", "1.x", None, "1.0,1.0"])


def rest_paths(paths: dict[str, str]) -> st.SearchStrategy[str]:
    segment = st.sampled_from(
        ["t-1", "unknown", "..", "%2e%2e", "a" * 300, "%00", "x:y"]
    ) | ids.filter(lambda s: "/" not in s and "?" not in s and "#" not in s)
    templates = [
        "/message:send",
        "/message:stream",
        "/tasks",
        "/tasks/{}",
        "/tasks/{}:cancel",
        "/tasks/{}:subscribe",
        "/tasks/{}/pushNotificationConfigs",
        "/tasks/{}/pushNotificationConfigs/{}",
        "/extendedAgentCard",
        "/{}/message:send",
        "/{}/tasks/{}",
        "/.well-known/agent-card.json",
        "/health",
        "/",
        "/{}",
    ]

    def fill(template: str, segs: list[str]) -> str:
        for seg in segs:
            template = template.replace("{}", seg, 1)
        return template.replace("{}", "x")

    return st.builds(
        fill, st.sampled_from(templates), st.lists(segment, min_size=2, max_size=2)
    ) | st.text(max_size=30).map(lambda t: "/" + t)


# ---------------------------------------------------------------- the server under test


@pytest.fixture
def workspace(tmp_path) -> dict[str, str]:
    root = tmp_path / "ws"
    project, other, outside = root / "project", root / "other", tmp_path / "outside"
    for d in (project, other, outside):
        d.mkdir(parents=True)
    (project / "notes.txt").write_text("hello")
    (outside / "secret.txt").write_text("secret")
    (project / "escape").symlink_to(outside)
    (project / "escape.txt").symlink_to(outside / "secret.txt")
    return {
        "root": str(root),
        "project": str(project),
        "other": str(other),
        "outside": str(outside),
        "file": str(project / "notes.txt"),
        "outside_file": str(outside / "secret.txt"),
        "link_file": str(project / "escape.txt"),
        "link_dir": str(project / "escape"),
        "tmp": str(tmp_path),
    }


@pytest.fixture
async def fuzz_service(start_service, workspace):
    return await start_service(
        http_port=0,
        store="memory:",
        agent="echo",
        push_notifications=False,
        input_modes=["text/plain", "application/json", "image/*"],
        workspace_roots=[workspace["root"]],
        max_request_bytes=256 * 1024,
        extended_card=True,
    )


def stored(service) -> int:
    store = service.store
    return len(store._tasks) + sum(len(c) for c in store._configs.values())


class Checker:
    """Shared assertions: no leak of local paths, nothing stored by refusals."""

    def __init__(self, service, paths: dict[str, str]) -> None:
        self.service = service
        self.secrets = {
            paths["tmp"],
            os.getcwd() + "/",
            str(pathlib.Path(service.settings.data_dir).resolve()),
            "Traceback",
            'File "/',
        }

    def clean(self, text: str, sent: str) -> None:
        """No local path or traceback in the answer, unless the client sent that very text (an echo is no leak)."""
        for secret in self.secrets:
            if secret not in sent:
                assert secret not in text, f"an error message leaks {secret!r}: {text[:300]}"

    @staticmethod
    def no_internal_error(r: httpx.Response) -> None:
        """No error object in the answer (plain JSON or any SSE event) is an internal error.

        Checked on the error's structure, not by searching the text: error messages
        may quote what the client sent, and generated input can spell anything.
        """
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            docs = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
        else:
            docs = [r.text]
        for raw in docs:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            error = doc.get("error") if isinstance(doc, dict) else None
            if not isinstance(error, dict):
                continue
            reasons = {
                d.get("reason")
                for d in error.get("details") or error.get("data") or []
                if isinstance(d, dict)
            }
            assert (
                error.get("code") != -32603
                and error.get("status") != "INTERNAL"
                and "INTERNAL_ERROR" not in reasons
            ), raw[:300]

    def refused_stored_nothing(self, before: int) -> None:
        assert stored(self.service) == before, "a refused request stored something"


async def run_in_thread(fn) -> None:
    await asyncio.wait_for(asyncio.to_thread(fn), timeout=600)


async def assert_still_serving(service) -> None:
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=10
    ) as client:
        assert (await client.get("/health")).status_code == 200
        r = await client.post(
            "/message:send",
            headers={"A2A-Version": "1.0"},
            json={"message": {"messageId": "ok-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
        )
        assert (
            r.status_code == 200 and r.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        )


# ---------------------------------------------------------------- the three bindings


async def test_fuzz_jsonrpc(fuzz_service, workspace):
    check = Checker(fuzz_service, workspace)
    base = f"http://127.0.0.1:{fuzz_service.http_port}/"

    def run() -> None:
        with httpx.Client(timeout=TIMEOUT) as client:

            @FUZZ_SETTINGS
            @given(body=jsonrpc_strategy(workspace), content_type=CONTENT_TYPES, version=VERSIONS)
            @example(body=HOSTILE_BODIES[0], content_type="application/json", version="1.0")
            @example(body=HOSTILE_BODIES[1], content_type="application/json", version="1.0")
            @example(body=HOSTILE_BODIES[5], content_type="application/json", version="1.0")
            @example(body=HOSTILE_BODIES[2], content_type=None, version="1.0")
            def one(body: bytes, content_type: str | None, version: str | None) -> None:
                headers = {
                    k: v
                    for k, v in (("Content-Type", content_type), ("A2A-Version", version))
                    if v is not None
                }
                before = stored(fuzz_service)
                r = client.post(base, content=body, headers=headers)
                assert r.status_code < 500, (r.status_code, r.text[:300])
                check.clean(r.text, body.decode("utf-8", "replace"))
                check.no_internal_error(r)  # JSON-RPC errors ride on 200
                if r.headers.get("content-type", "").startswith("text/event-stream"):
                    return  # accepted stream (errors inside travel as events; checked above)
                doc = r.json()
                if "error" in doc:
                    check.refused_stored_nothing(before)

            one()

    await run_in_thread(run)
    await assert_still_serving(fuzz_service)


async def test_fuzz_rest(fuzz_service, workspace):
    check = Checker(fuzz_service, workspace)
    base = f"http://127.0.0.1:{fuzz_service.http_port}"

    def run() -> None:
        with httpx.Client(base_url=base, timeout=TIMEOUT) as client:

            @FUZZ_SETTINGS
            @given(
                method=st.sampled_from(["GET", "POST", "POST", "PUT", "DELETE", "PATCH"]),
                path=rest_paths(workspace),
                body=body_strategy(workspace),
                query=st.lists(
                    st.tuples(
                        st.sampled_from(
                            [
                                "historyLength",
                                "pageSize",
                                "status",
                                "tenant",
                                "contextId",
                                "message.messageId",
                                "x",
                                "a2a-version",
                            ]
                        )
                        | st.text(max_size=8),
                        st.text(max_size=12),
                    ),
                    max_size=3,
                ),
                content_type=CONTENT_TYPES,
                version=VERSIONS,
            )
            @example(
                method="POST",
                path="/message:send",
                body=HOSTILE_BODIES[0],
                query=[],
                content_type="application/json",
                version="1.0",
            )
            @example(
                method="POST",
                path="/message:send",
                body=HOSTILE_BODIES[1],
                query=[],
                content_type="application/json",
                version="1.0",
            )
            @example(
                method="POST",
                path="/message:stream",
                body=HOSTILE_BODIES[4],
                query=[],
                content_type=None,
                version="1.0",
            )
            def one(method, path, body, query, content_type, version) -> None:
                headers = {
                    k: v
                    for k, v in (("Content-Type", content_type), ("A2A-Version", version))
                    if v is not None
                }
                before = stored(fuzz_service)
                try:
                    request = client.build_request(
                        method,
                        path,
                        params=query,
                        headers=headers,
                        content=body if method in ("POST", "PUT", "PATCH") else None,
                    )
                except (httpx.InvalidURL, UnicodeEncodeError, ValueError):
                    return  # not something an HTTP client can send
                r = client.send(request)
                assert r.status_code < 500, (method, path, r.status_code, r.text[:300])
                check.clean(r.text, f"{path} {query} {body.decode('utf-8', 'replace')}")
                check.no_internal_error(r)  # also inside streams
                if r.status_code >= 400:
                    check.refused_stored_nothing(before)

            one()

    await run_in_thread(run)
    await assert_still_serving(fuzz_service)


async def test_fuzz_grpc(fuzz_service, workspace):
    check = Checker(fuzz_service, workspace)
    target = f"127.0.0.1:{fuzz_service.grpc_port}"
    messages = message_strategy(workspace)

    def to_request(doc: dict) -> bytes | None:
        request = pb.SendMessageRequest()
        try:
            json_format.ParseDict({"message": doc}, request, ignore_unknown_fields=True)
        except (json_format.ParseError, TypeError, ValueError, AttributeError, RecursionError):
            return None
        return request.SerializeToString()

    def flip(data: bytes, positions: list[int]) -> bytes:
        if not data:
            return data
        out = bytearray(data)
        for p in positions:
            out[p % len(out)] ^= 0x5A
        return bytes(out)

    payloads = st.one_of(
        st.binary(max_size=300),
        st.builds(lambda d: to_request(d) or b"", messages),
        st.builds(
            lambda d, pos: flip(to_request(d) or b"", pos),
            messages,
            st.lists(st.integers(0, 10_000), max_size=3),
        ),
        st.sampled_from(
            [b"\x0a" * 1000, b"\x0a\xff\xff\xff\xff\x0f", b"\x12\x00" * 100, b"\x00" * 300_000]
        ),
    )
    versions = st.sampled_from([None, "1.0", "0.3", "", "9"])

    def run() -> None:
        with grpc.insecure_channel(target) as channel:
            calls = {
                name: (channel.unary_stream if name in STREAMING else channel.unary_unary)(
                    f"/{SERVICE.full_name}/{name}"
                )
                for name in METHODS
            }

            @FUZZ_SETTINGS
            @given(
                method=st.sampled_from(
                    METHODS + ["SendMessage"] * 6 + ["SendStreamingMessage"] * 3
                ),
                payload=payloads,
                version=versions,
            )
            def one(method: str, payload: bytes, version: str | None) -> None:
                metadata = (("a2a-version", version),) if version is not None else None
                before = stored(fuzz_service)
                try:
                    result = calls[method](payload, timeout=TIMEOUT, metadata=metadata)
                    if method in STREAMING:
                        for _ in result:
                            pass
                except grpc.RpcError as err:
                    assert err.code() not in BAD_GRPC, (method, err.code(), err.details())
                    check.clean(err.details() or "", payload.decode("utf-8", "replace"))
                    check.refused_stored_nothing(before)

            one()

    await run_in_thread(run)
    await assert_still_serving(fuzz_service)
