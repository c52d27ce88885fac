"""Input validation on every binding, before any work or storage: request and part size
limits, media types against the declared input modes, file:// and remote URL parts, the
per-message working directory and its context rule, and errors that echo no local path."""

from __future__ import annotations

import base64
import os
import pathlib

import grpc
import httpx
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.agent import TurnContext
from service.inputs.workspace import DIR_REFUSED, FILE_REFUSED, cwd_of
from service.store import Scope, TaskQuery
from tests.conftest import user_message
from tests.grpc_util import error_details, expect_error

C = grpc.StatusCode
V1 = {"A2A-Version": "1.0"}
MODES = ["text/plain", "application/json", "image/*"]


class WorkspaceAgent:
    """Reports the working directory and the parts it was given."""

    name = "Workspace test agent"

    async def run(self, ctx: TurnContext) -> None:
        kinds = ",".join(p.WhichOneof("content") for p in ctx.message.parts)
        await ctx.artifact(f"cwd={cwd_of(ctx.metadata) or '-'} parts={kinds}", name="report")


@pytest.fixture
def roots(tmp_path):
    root = tmp_path / "ws"
    (root / "project").mkdir(parents=True)
    (root / "other").mkdir()
    (root / "project" / "notes.txt").write_text("hello")
    (root / "project" / "big.txt").write_text("x" * 5000)
    (root / "project" / "pic.png").write_bytes(b"\x89PNG" + b"\0" * 5000)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret")
    (root / "project" / "escape").symlink_to(outside)
    (root / "project" / "escape.txt").symlink_to(outside / "secret.txt")
    return root


@pytest.fixture
async def svc(start_service, roots):
    service = await start_service(
        http_port=0,
        store="memory:",
        agent="tests.integration.test_input_validation:WorkspaceAgent",
        input_modes=MODES,
        workspace_roots=[str(roots)],
        input_max_text_bytes=4096,
        input_max_binary_bytes=8192,
        input_max_file_bytes=4096,
        input_max_parts=5,
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        service.stub = a2a_pb2_grpc.A2AServiceStub(channel)
        yield service


def send(parts=None, *, cwd=None, context_id="", task_id="", text="hi") -> pb.SendMessageRequest:
    message = user_message(text, context_id=context_id, task_id=task_id)
    if parts is not None:
        del message.parts[:]
        message.parts.extend(parts)
    if cwd is not None:
        message.metadata.update({"a2a_service": {"cwd": cwd}})
    return pb.SendMessageRequest(message=message)


async def stored_tasks(service) -> int:
    return sum(1 for _ in service.store._tasks)  # memory store: every scope


async def refused(service, request, reason="INVALID_PARAMS", field=None, code=C.INVALID_ARGUMENT):
    before = await stored_tasks(service)
    err = await expect_error(service.stub.SendMessage(request), code, reason)
    assert await stored_tasks(service) == before, "a refused request stored something"
    _, violations = error_details(err)
    if field is not None:
        assert violations and violations[0][0] == field, (violations, err.details())
    return err


async def report(service, request) -> str:
    task = (await service.stub.SendMessage(request)).task
    assert task.status.state == pb.TASK_STATE_COMPLETED, task
    return task.artifacts[0].parts[0].text


# ---------------------------------------------------------------- sizes and counts


async def test_part_count_and_inline_sizes(svc):
    await report(svc, send([pb.Part(text="x")] * 5))
    await refused(svc, send([pb.Part(text="x")] * 6), field="message.parts")
    await report(svc, send([pb.Part(text="é" * 2048)]))  # 4096 bytes: at the limit
    err = await refused(svc, send([pb.Part(text="é" * 2049)]), field="message.parts[0].text")
    assert "4.0 KiB" in err.details()
    # raw: text-like types use the text limit and must be UTF-8; binary types the binary limit
    await refused(
        svc, send([pb.Part(raw=b"x" * 4097, media_type="text/plain")]), field="message.parts[0].raw"
    )
    await refused(
        svc, send([pb.Part(raw=b"\xff\xfe", media_type="text/plain")]), field="message.parts[0].raw"
    )
    await report(svc, send([pb.Part(raw=b"\0" * 8192, media_type="image/png")]))
    await refused(
        svc, send([pb.Part(raw=b"\0" * 8193, media_type="image/png")]), field="message.parts[0].raw"
    )
    big = pb.Part(media_type="application/json")
    big.data.string_value = "y" * 5000
    await refused(svc, send([big]), field="message.parts[0].data")


async def test_whole_request_limit_on_grpc_and_http(start_service):
    service = await start_service(http_port=0, store="memory:", max_request_bytes=64 * 1024)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.SendMessage(send([pb.Part(raw=b"\0" * 70_000, media_type="text/plain")]))
        assert info.value.code() == C.RESOURCE_EXHAUSTED
    body = (
        b'{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"x":"' + b"a" * 70_000 + b'"}}'
    )
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{service.http_port}", timeout=10
    ) as client:
        r = await client.post("/", content=body, headers={**V1, "Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == -32600
        r = await client.post(
            "/message:send", content=body, headers={**V1, "Content-Type": "application/json"}
        )
        assert r.status_code == 413 and "65536 bytes" in r.json()["error"]["message"]


# ---------------------------------------------------------------- media types


async def test_media_types_are_checked_against_the_input_modes(svc):
    await report(svc, send([pb.Part(raw=b"\0", media_type="image/webp")]))  # image/* wildcard
    await report(svc, send([pb.Part(raw=b"{}", media_type="application/json; charset=utf-8")]))
    err = await refused(
        svc, send([pb.Part(raw=b"\0", media_type="audio/ogg")]), "CONTENT_TYPE_NOT_SUPPORTED"
    )
    assert "audio/ogg" in err.details() and "text/plain, application/json, image/*" in err.details()
    info, _ = error_details(err)
    assert info.metadata["mediaType"] == "audio/ogg"
    # No media type: raw parts are application/octet-stream, which this agent does not take.
    await refused(svc, send([pb.Part(raw=b"\0")]), "CONTENT_TYPE_NOT_SUPPORTED")
    await refused(
        svc, send([pb.Part(text="x", media_type="not a type")]), field="message.parts[0].mediaType"
    )


async def test_content_type_error_on_every_binding(svc):
    part = {"raw": base64.b64encode(b"\0").decode(), "mediaType": "video/mp4"}
    message = {"messageId": "m1", "role": "ROLE_USER", "parts": [part]}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{svc.http_port}", timeout=10
    ) as client:
        r = await client.post(
            "/",
            headers=V1,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": message},
            },
        )
        assert r.json()["error"]["code"] == -32005 and "video/mp4" in r.json()["error"]["message"]
        r = await client.post("/message:send", headers=V1, json={"message": message})
        assert (
            r.status_code == 400
            and r.json()["error"]["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
        )
    await refused(
        svc, send([pb.Part(raw=b"\0", media_type="video/mp4")]), "CONTENT_TYPE_NOT_SUPPORTED"
    )


# ---------------------------------------------------------------- URL parts


async def test_file_urls_inside_the_workspace_only(svc, roots, tmp_path):
    project = roots / "project"
    ok = pb.Part(url=(project / "notes.txt").as_uri())
    assert "parts=url" in await report(svc, send([ok]))
    assert "parts=url" in await report(
        svc, send([pb.Part(url=(project / "notes.txt").as_uri())], cwd=str(project))
    )
    secret = str(tmp_path / "outside" / "secret.txt")
    cases = [
        pathlib.Path(secret).as_uri(),  # outside every root
        (project / "escape.txt").as_uri(),  # a symlink inside pointing outside
        (project / "escape" / "secret.txt").as_uri(),  # a symlinked directory
        f"file://{project}/../../outside/secret.txt",  # dot-dot segments
        "file:///etc/passwd",
    ]
    for url in cases:
        err = await refused(
            svc, send([pb.Part(url=url, media_type="text/plain")]), field="message.parts[0].url"
        )
        assert FILE_REFUSED in err.details()
        assert str(tmp_path) not in err.details() and "passwd" not in err.details()
    # With a working directory, files must be inside it (not just inside a root).
    err = await refused(svc, send([ok], cwd=str(roots / "other")), field="message.parts[0].url")
    assert FILE_REFUSED in err.details()
    for missing_or_not_a_file in ((project / "missing.txt").as_uri(), project.as_uri()):
        err = await refused(
            svc,
            send([pb.Part(url=missing_or_not_a_file, media_type="text/plain")]),
            field="message.parts[0].url",
        )
        assert FILE_REFUSED in err.details()
    await refused(svc, send([pb.Part(url="file://otherhost/etc/hosts", media_type="text/plain")]))
    await refused(svc, send([pb.Part(url="notes.txt", media_type="text/plain")]))  # relative


async def test_file_url_size_limits(svc, roots):
    project = roots / "project"
    err = await refused(
        svc, send([pb.Part(url=(project / "big.txt").as_uri())]), field="message.parts[0].url"
    )
    assert FILE_REFUSED in err.details() and "KiB" not in err.details()  # a size tells what exists
    # Binary media use the file limit (4096 in this test)
    await refused(
        svc, send([pb.Part(url=(project / "pic.png").as_uri())]), field="message.parts[0].url"
    )
    (project / "small.png").write_bytes(b"\x89PNG")
    await report(svc, send([pb.Part(url=(project / "small.png").as_uri())]))


async def test_remote_urls_are_refused_unless_enabled(svc, start_service, roots):
    for url in (
        "https://example.com/a.txt",
        "http://169.254.169.254/latest/meta-data",
        "ftp://x/y.txt",
        "data:text/plain,hi",
        "javascript:alert(1)",
    ):
        await refused(
            svc, send([pb.Part(url=url, media_type="text/plain")]), field="message.parts[0].url"
        )
    open_service = await start_service(
        store="memory:",
        agent="tests.integration.test_input_validation:WorkspaceAgent",
        input_allow_remote_urls=True,
        data_dir=str(roots / "d2"),
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{open_service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        task = (await stub.SendMessage(send([pb.Part(url="https://example.com/a.txt")]))).task
        assert task.status.state == pb.TASK_STATE_COMPLETED
        await expect_error(
            stub.SendMessage(
                send([pb.Part(url="ftp://example.com/a.txt", media_type="text/plain")])
            ),
            C.INVALID_ARGUMENT,
            "INVALID_PARAMS",
        )


# ---------------------------------------------------------------- the working directory


async def test_working_directory_rules(svc, roots, tmp_path):
    project = roots / "project"
    assert f"cwd={project}" in await report(svc, send(cwd=str(project)))
    field = "message.metadata.a2a_service.cwd"
    # Only syntax gets its own message; whatever depends on the disk reads the same.
    for bad, problem in [
        ("relative/dir", "absolute"),
        (str(roots / "nope"), DIR_REFUSED),
        (str(project / "notes.txt"), DIR_REFUSED),
        (str(tmp_path / "outside"), DIR_REFUSED),
        (str(project / "escape"), DIR_REFUSED),
        ("/", DIR_REFUSED),
        ("/\x00x", DIR_REFUSED),
    ]:
        err = await refused(svc, send(cwd=bad), field=field)
        assert problem in err.details() and str(tmp_path) not in err.details()
    for metadata in (
        {"a2a_service": "x"},
        {"a2a_service": {"cwd": 3}},
        {"a2a_service": {"cwd": ""}},
    ):
        request = send()
        request.message.metadata.update(metadata)
        await refused(svc, request)


async def test_a_context_keeps_its_workspace(svc, roots):
    project, other = roots / "project", roots / "other"
    first = (await svc.stub.SendMessage(send(cwd=str(project)))).task
    ctx = first.context_id
    # Same context, no cwd: inherits the workspace (the agent runs there too).
    assert f"cwd={project}" in await report(svc, send(context_id=ctx))
    # Same context, same cwd (spelled differently): fine. Another one: refused.
    assert f"cwd={project}" in await report(svc, send(context_id=ctx, cwd=f"{project}/../project"))
    err = await refused(
        svc, send(context_id=ctx, cwd=str(other)), field="message.metadata.a2a_service.cwd"
    )
    assert "contextId" in err.details()
    # A context that started without a working directory keeps having none.
    plain = (await svc.stub.SendMessage(send())).task
    await refused(svc, send(context_id=plain.context_id, cwd=str(project)))
    # A brand-new context may choose any.
    assert f"cwd={other}" in await report(svc, send(context_id="fresh-ctx", cwd=str(other)))


async def test_follow_ups_keep_the_task_workspace(start_service, roots):
    service = await start_service(
        store="memory:", agent="tests.agents:ScriptedAgent", workspace_roots=[str(roots)]
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        task = (await stub.SendMessage(send(text="input more", cwd=str(roots / "project")))).task
        assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        await expect_error(
            stub.SendMessage(send(text="x", task_id=task.id, cwd=str(roots / "other"))),
            C.INVALID_ARGUMENT,
            "INVALID_PARAMS",
        )
        done = (await stub.SendMessage(send(text="x", task_id=task.id))).task
        assert done.status.state == pb.TASK_STATE_COMPLETED
        assert done.history[-1].metadata["a2a_service"]["cwd"] == str(roots / "project")


async def test_the_context_rule_survives_a_restart(start_service, roots, tmp_path):
    settings = dict(
        store=f"sqlite:{tmp_path / 'tasks.db'}",
        agent="tests.integration.test_input_validation:WorkspaceAgent",
        workspace_roots=[str(roots)],
        push_notifications=False,
    )
    first = await start_service(**settings)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{first.grpc_port}") as channel:
        task = (
            await a2a_pb2_grpc.A2AServiceStub(channel).SendMessage(send(cwd=str(roots / "project")))
        ).task
    await first.stop()
    second = await start_service(**settings)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{second.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        await expect_error(
            stub.SendMessage(send(context_id=task.context_id, cwd=str(roots / "other"))),
            C.INVALID_ARGUMENT,
            "INVALID_PARAMS",
        )
        again = (await stub.SendMessage(send(context_id=task.context_id))).task
        assert f"cwd={roots / 'project'}" in again.artifacts[0].parts[0].text


async def test_command_agent_runs_in_the_working_directory(start_service, roots):
    service = await start_service(
        store="memory:", agent="command", command="pwd", workspace_roots=[str(roots)]
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        task = (await stub.SendMessage(send(cwd=str(roots / "project")))).task
        assert "".join(p.text for p in task.artifacts[0].parts).strip() == str(roots / "project")
        task = (await stub.SendMessage(send())).task  # no cwd: the per-context directory
        assert f"ctx-{task.context_id}" in "".join(p.text for p in task.artifacts[0].parts)


async def test_without_workspace_roots_no_message_reaches_the_disk(start_service, tmp_path, caplog):
    """No default roots (the service is network-facing): file:// parts and working directories
    are refused, even for the working and temp directories (the roots of old)."""
    service = await start_service(
        store="memory:", agent="tests.integration.test_input_validation:WorkspaceAgent"
    )
    (tmp_path / "there.txt").write_text("x")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        for cwd in (
            os.getcwd(),
            str(tmp_path),
            "/usr",
        ):  # pytest's tmp_path lives in the temp directory
            err = await expect_error(
                stub.SendMessage(send(cwd=cwd)), C.INVALID_ARGUMENT, "INVALID_PARAMS"
            )
            assert DIR_REFUSED in err.details()
        caplog.set_level("INFO", logger="service.workspace")
        for path in (tmp_path / "there.txt", tmp_path / "missing.txt"):
            err = await expect_error(
                stub.SendMessage(send([pb.Part(url=path.as_uri(), media_type="text/plain")])),
                C.INVALID_ARGUMENT,
                "INVALID_PARAMS",
            )
            assert FILE_REFUSED in err.details()
        assert "workspace_roots is not configured" in caplog.text  # the operator learns why


# ---------------------------------------------------------------- malformed wire input


async def test_undecodable_grpc_bytes_are_invalid_argument_without_internals(svc):
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{svc.grpc_port}")
    async with channel:
        for method in ("SendMessage", "GetTask", "SendStreamingMessage"):
            call = (
                channel.unary_stream if method == "SendStreamingMessage" else channel.unary_unary
            )(f"/lf.a2a.v1.A2AService/{method}")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                result = call(b"\xff\xff\xff\x0a", timeout=5)
                if method == "SendStreamingMessage":
                    async for _ in result:
                        pass
                else:
                    await result
            assert info.value.code() == C.INVALID_ARGUMENT
            assert (
                "DecodeError" not in info.value.details()
                and "protobuf message" in info.value.details()
            )
            info_detail, _ = error_details(info.value)
            assert info_detail.reason == "INVALID_REQUEST"


async def test_deeply_nested_json_is_a_parse_error(svc):
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{svc.http_port}", timeout=10
    ) as client:
        r = await client.post(
            "/", headers={**V1, "Content-Type": "application/json"}, content=b"[" * 100_000
        )
        assert r.status_code == 200 and r.json()["error"]["code"] == -32700
        r = await client.post(
            "/message:send",
            headers={**V1, "Content-Type": "application/json"},
            content=b'{"message":' * 50_000,
        )
        assert r.status_code == 400


async def test_bad_input_settings_stop_startup(tmp_path):
    from service.app import config

    for settings, message in [
        ({"max_request_bytes": 10}, "max_request_bytes"),
        ({"input_max_parts": 0}, "input_max_parts"),
        ({"workspace_roots": [str(tmp_path / "missing")]}, "workspace_roots"),
        ({"input_text_media_types": ["nope"]}, "input_text_media_types"),
    ]:
        with pytest.raises(config.ConfigError, match=message):
            config.validate(config.Settings(**settings))
    loaded = config.load(
        env={"A2A_WORKSPACE_ROOTS": f"{tmp_path},/tmp", "A2A_INPUT_MAX_PARTS": "7"}
    )
    assert loaded.workspace_roots == [str(tmp_path), "/tmp"] and loaded.input_max_parts == 7


async def test_nothing_is_listed_after_refusals(svc):
    for request in (
        send([pb.Part(text="x")] * 9),
        send(cwd="/etc"),
        send([pb.Part(url="https://e.com/x")]),
    ):
        await refused(svc, request)
    page = await svc.store.list(Scope(), TaskQuery())
    assert page.total_size == 0


async def test_the_service_state_and_secret_files_are_out_of_reach(start_service, tmp_path):
    """Even inside an allowed root: the data directory and files named by *_file settings."""
    secret = tmp_path / "card.secret"
    secret.write_text("s" * 40)
    service = await start_service(
        store="memory:",
        agent="tests.integration.test_input_validation:WorkspaceAgent",
        workspace_roots=[str(tmp_path)],
        card_signing_secret_file=str(secret),
    )
    data = pathlib.Path(service.settings.data_dir)
    (data / "state.txt").parent.mkdir(parents=True, exist_ok=True)
    (data / "state.txt").write_text("state")
    (tmp_path / "fine.txt").write_text("fine")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        task = (await stub.SendMessage(send([pb.Part(url=(tmp_path / "fine.txt").as_uri())]))).task
        assert task.status.state == pb.TASK_STATE_COMPLETED
        for path in (secret, data / "state.txt"):
            err = await expect_error(
                stub.SendMessage(send([pb.Part(url=path.as_uri(), media_type="text/plain")])),
                C.INVALID_ARGUMENT,
                "INVALID_PARAMS",
            )
            assert FILE_REFUSED in err.details()
        await expect_error(
            stub.SendMessage(send(cwd=str(data))), C.INVALID_ARGUMENT, "INVALID_PARAMS"
        )


def test_key_file_entries_with_and_without_a_kid():
    from service.cards.signing import split_key_entry

    assert split_key_entry("2026-06=/etc/a2a/card.pem") == ("2026-06", "/etc/a2a/card.pem")
    assert split_key_entry("/etc/a=b/card.pem") == ("", "/etc/a=b/card.pem")
    assert split_key_entry("card.pem") == ("", "card.pem")


async def test_undecodable_bytes_from_an_unknown_caller_are_unauthenticated(start_service):
    token = "t" * 32
    service = await start_service(store="memory:", auth_bearer_tokens=[f"alice={token}"])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel:
        call = channel.unary_unary("/lf.a2a.v1.A2AService/SendMessage")
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(b"\xff\xff\xff", timeout=5)
        assert info.value.code() == C.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call(b"\xff\xff\xff", timeout=5, metadata=(("authorization", f"Bearer {token}"),))
        assert info.value.code() == C.INVALID_ARGUMENT


async def test_every_file_refusal_reads_the_same_and_the_reason_is_logged(
    svc, roots, tmp_path, caplog
):
    """No file oracle: a caller cannot tell a missing file from a directory, a big file, a file
    outside the roots or the service's own state; the operator's log says which it was."""
    project = roots / "project"
    (project / "locked.txt").write_text("locked")
    (project / "locked.txt").chmod(0)
    cases = {
        "missing": (project / "missing.txt").as_uri(),
        "a directory": project.as_uri(),
        "too big": (project / "big.txt").as_uri(),
        "outside the roots": (tmp_path / "outside" / "secret.txt").as_uri(),
        "outside, missing": (tmp_path / "outside" / "nothing.txt").as_uri(),
        "a device": "file:///dev/null",
        "a line break in the name": f"file://{project}/forged%0AINFO%20line.txt",
    }
    if os.geteuid() != 0:  # root reads anything
        cases["unreadable"] = (project / "locked.txt").as_uri()
    caplog.set_level("INFO", logger="service.workspace")
    answers = set()
    for url in cases.values():
        err = await refused(
            svc, send([pb.Part(url=url, media_type="text/plain")]), field="message.parts[0].url"
        )
        answers.add((err.details(), str(error_details(err))))
    assert len(answers) == 1, answers
    logged = caplog.text
    for reason in (
        "cannot stat it",
        "not a regular file",
        "may be at most",
        "outside the workspace roots",
    ):
        assert reason in logged, (reason, logged)
    assert "\n" not in "".join(r.getMessage() for r in caplog.records)  # client text is escaped
