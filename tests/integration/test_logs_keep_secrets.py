"""Secrets never reach a log line (at DEBUG) or an answer, on gRPC, JSON-RPC and REST.

One server process with bearer tokens, Basic users, API keys and push notifications, its
log at DEBUG in JSON (its stderr is a pipe). Over every binding: calls with the right
credentials, wrong ones (guessed tokens, passwords, keys), push configs carrying a token
and credentials, a callback URL with a password in it, a `file://` part naming a local
path, and errors of every class — refused credentials, invalid params, not found,
unsupported, parse errors, and an agent that raises with a secret in its message. Then:
none of those strings is in any log line or any response; every log line is one JSON
record; every call left an access line with its outcome, and the agent's failure ref
is in the log.
"""

from __future__ import annotations

import base64
import json

import grpc
import httpx
import pytest

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from service.protocol.grpc_status import status_details
from tests.agents import AGENT_SECRET
from tests.process import ServerProcess, free_port

TOKEN = "bearer-secret-0123456789abcdef"
PASSWORD = "basic-secret-pass-1"
API_KEY = "apikey-secret-0123456789abcd"
GUESSES = ("guessed-token-0123456789abcdef", "guessed-pass-1", "guessed-key-0123456789abcdef")
PUSH_TOKEN = "push-token-secret-0123456789"
PUSH_CREDENTIALS = "push-credentials-secret-0123"
URL_PASSWORD = "url-password-secret-0123"
CLIENT_PATH = "/home/someone/private-project/contract-draft.txt"
PARSE_SECRET = "parse-secret-0123456789abcdef"
SECRETS = (
    TOKEN,
    PASSWORD,
    API_KEY,
    *GUESSES,
    PUSH_TOKEN,
    PUSH_CREDENTIALS,
    URL_PASSWORD,
    CLIENT_PATH,
    PARSE_SECRET,
    AGENT_SECRET,
    base64.b64encode(f"carol:{PASSWORD}".encode()).decode(),
)
BINDINGS = ("grpc", "jsonrpc", "rest")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _message(text: str, **fields) -> dict:
    return {"messageId": f"m-{abs(hash((text, str(fields))))}", "role": "ROLE_USER", **fields} | {
        "parts": fields.pop("parts", [{"text": text}])
    }


def _push_config(url: str = "https://push.example.invalid/callback") -> dict:
    return {
        "url": url,
        "token": PUSH_TOKEN,
        "authentication": {"scheme": "Bearer", "credentials": PUSH_CREDENTIALS},
    }


class Http:
    """JSON-RPC or REST calls as documents; every answer is kept."""

    def __init__(self, client: httpx.AsyncClient, binding: str, answers: list[str]) -> None:
        self.client, self.binding, self.answers = client, binding, answers

    async def call(
        self, method: str, params: dict, headers: dict[str, str], owner_read: bool = False
    ) -> dict:
        """`owner_read`: a push config as its owner reads it back (secrets in clear, by
        design), so that answer is not kept for the check."""
        headers = {"A2A-Version": "1.0", "Content-Type": "application/json", **headers}
        if self.binding == "jsonrpc":
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            response = await self.client.post("/", json=body, headers=headers)
        else:
            path, verb = {
                "SendMessage": ("/message:send", "POST"),
                "GetTask": (f"/tasks/{params.get('id')}", "GET"),
                "CreateTaskPushNotificationConfig": (
                    f"/tasks/{params.get('taskId')}/pushNotificationConfigs",
                    "POST",
                ),
            }[method]
            response = await self.client.request(
                verb, path, json=params if verb == "POST" else None, headers=headers
            )
        if not (owner_read and response.status_code == 200 and "error" not in response.text):
            self.answers.append(response.text + json.dumps(dict(response.headers)))
        try:
            return response.json()
        except ValueError:
            return {}

    async def raw(self, body: bytes, headers: dict[str, str]) -> None:
        path = "/" if self.binding == "jsonrpc" else "/message:send"
        headers = {"A2A-Version": "1.0", "Content-Type": "application/json", **headers}
        response = await self.client.post(path, content=body, headers=headers)
        self.answers.append(response.text + json.dumps(dict(response.headers)))


def _task_of(doc: dict) -> dict:
    result = doc.get("result", doc)
    return result.get("task", result)


async def _exercise_http(base: str, binding: str, answers: list[str]) -> None:
    good = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=base, timeout=20) as client:
        http = Http(client, binding, answers)
        send = {"message": _message("hello")}
        for headers in (
            {"Authorization": f"Bearer {GUESSES[0]}"},
            {"Authorization": _basic("carol", GUESSES[1])},
            {"X-API-Key": GUESSES[2]},
            {"Authorization": f"Bearer {TOKEN}", "X-API-Key": GUESSES[2]},
        ):
            await http.call("SendMessage", send, headers)
        for headers in (good, {"Authorization": _basic("carol", PASSWORD)}, {"X-API-Key": API_KEY}):
            done = _task_of(await http.call("SendMessage", send, headers))
            assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
        with_push = {
            "message": _message("hello"),
            "configuration": {"taskPushNotificationConfig": _push_config()},
        }
        task = _task_of(await http.call("SendMessage", with_push, good))
        await http.call(
            "CreateTaskPushNotificationConfig",
            {"taskId": task["id"], **_push_config()},
            good,
            owner_read=True,
        )
        bad_url = _push_config(f"https://user:{URL_PASSWORD}@example.com/cb")
        await http.call("CreateTaskPushNotificationConfig", {"taskId": task["id"], **bad_url}, good)
        # invalid params, a local path, not found, unsupported (a finished task), internal
        await http.call("SendMessage", {"message": _message("x", messageId="bad id!")}, good)
        file_part = {"url": f"file://{CLIENT_PATH}", "mediaType": "text/plain"}
        await http.call("SendMessage", {"message": _message("f", parts=[file_part])}, good)
        await http.call("GetTask", {"id": "no-such-task"}, good)
        await http.call("SendMessage", {"message": _message("again", taskId=task["id"])}, good)
        failed = _task_of(await http.call("SendMessage", {"message": _message("leak")}, good))
        assert failed["status"]["state"] == "TASK_STATE_FAILED", failed
        # parse errors, with a secret inside the broken body
        await http.raw(b'{"message": {"messageId": "' + PARSE_SECRET.encode() + b'", ', good)
        await http.raw(b'\xff\xfe{"x": "' + PARSE_SECRET.encode() + b'"}', good)


def _grpc_error(exc: grpc.aio.AioRpcError) -> str:
    info, violations = status_details(exc)
    return f"{exc.code()} {exc.details()} {info} {violations}"


async def _exercise_grpc(address: str, answers: list[str]) -> None:
    good = (("authorization", f"Bearer {TOKEN}"),)

    async def call(method, request, metadata, owner_read: bool = False) -> object | None:
        try:
            response = await method(request, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            answers.append(_grpc_error(exc))
            return None
        if not owner_read:  # a push config read back by its owner carries its secrets
            answers.append(str(response))
        return response

    def send(text: str = "hello", **fields) -> pb.SendMessageRequest:
        parts = fields.pop("parts", [pb.Part(text=text)])
        message = pb.Message(
            message_id=fields.pop("message_id", f"g-{abs(hash(text))}-{len(answers)}"),
            role=pb.ROLE_USER,
            parts=parts,
            **fields,
        )
        return pb.SendMessageRequest(message=message)

    push = pb.TaskPushNotificationConfig(
        url="https://push.example.invalid/callback",
        token=PUSH_TOKEN,
        authentication=pb.AuthenticationInfo(scheme="Bearer", credentials=PUSH_CREDENTIALS),
    )
    async with grpc.aio.insecure_channel(address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        for metadata in (
            (("authorization", f"Bearer {GUESSES[0]}"),),
            (("authorization", _basic("carol", GUESSES[1])),),
            (("x-api-key", GUESSES[2]),),
        ):
            await call(stub.SendMessage, send(), metadata)
        for metadata in (
            good,
            (("authorization", _basic("carol", PASSWORD)),),
            (("x-api-key", API_KEY),),
        ):
            done = await call(stub.SendMessage, send(), metadata)
            assert done is not None and done.task.status.state == pb.TASK_STATE_COMPLETED
        request = send()
        request.configuration.task_push_notification_config.CopyFrom(push)
        created = await call(stub.SendMessage, request, good)
        assert created is not None
        task_id = created.task.id
        config = pb.TaskPushNotificationConfig()
        config.CopyFrom(push)
        config.task_id = task_id
        await call(stub.CreateTaskPushNotificationConfig, config, good, owner_read=True)
        config.url = f"https://user:{URL_PASSWORD}@example.com/cb"
        await call(stub.CreateTaskPushNotificationConfig, config, good)
        await call(stub.SendMessage, send(message_id="bad id!"), good)
        file_part = pb.Part(url=f"file://{CLIENT_PATH}", media_type="text/plain")
        await call(stub.SendMessage, send(parts=[file_part]), good)
        await call(stub.GetTask, pb.GetTaskRequest(id="no-such-task"), good)
        await call(stub.SendMessage, send("again", task_id=task_id), good)
        failed = await call(stub.SendMessage, send("leak"), good)
        assert failed is not None and failed.task.status.state == pb.TASK_STATE_FAILED
        raw = channel.unary_unary("/lf.a2a.v1.A2AService/SendMessage")
        try:  # not a SendMessageRequest: a parse error on gRPC
            await raw(b"\x0a\xff\xff\xff" + PARSE_SECRET.encode(), metadata=good)
        except grpc.aio.AioRpcError as exc:
            answers.append(_grpc_error(exc))


@pytest.fixture
def server(tmp_path):
    http_port = free_port()
    proc = ServerProcess(
        "--http-port",
        str(http_port),
        "--data-dir",
        str(tmp_path / "data"),
        "--agent",
        "tests.agents:ScriptedAgent",
        "--push-notifications",
        "true",
        "--log-level",
        "DEBUG",
        env={
            "A2A_AUTH_BEARER_TOKENS": f"alice={TOKEN}",
            "A2A_AUTH_BASIC_USERS": f"carol:{PASSWORD}",
            "A2A_AUTH_API_KEYS": f"ci={API_KEY}",
            "A2A_PUSH_MAX_ATTEMPTS": "2",
            "A2A_PUSH_RETRY_BASE_SECONDS": "0.05",
        },
    ).start()
    proc.http_port = http_port
    yield proc
    proc.stop()


async def test_no_secret_reaches_a_log_line_or_an_answer(server):
    answers: list[str] = []
    await _exercise_grpc(server.address, answers)
    for binding in ("jsonrpc", "rest"):
        await _exercise_http(f"http://127.0.0.1:{server.http_port}", binding, answers)
    assert server.stop() == 0
    output = server.rest_of_output()

    for secret in SECRETS:
        assert secret not in output, f"{secret!r} is in the log"
        leaked = [a for a in answers if secret in a]
        assert not leaked, f"{secret!r} is in an answer: {leaked[0][:300]}"

    records = []
    for line in output.splitlines():
        if line.startswith("A2A service ready"):
            continue
        records.append(json.loads(line))  # every line is one JSON record
    assert any(r["level"] == "DEBUG" for r in records)  # the log really was at DEBUG

    lines = [r for r in records if r["logger"].startswith("service.access")]
    outcomes = {(r["binding"], r["outcome"]) for r in lines}
    for binding in BINDINGS:
        for outcome in (
            "OK",
            "UNAUTHENTICATED",
            "INVALID_PARAMS",
            "TASK_NOT_FOUND",
            "UNSUPPORTED_OPERATION",
        ):
            assert (binding, outcome) in outcomes, (binding, outcome, sorted(outcomes))
    assert ("grpc", "INVALID_REQUEST") in outcomes  # undecodable bytes
    assert ("jsonrpc", "PARSE_ERROR") in outcomes and ("rest", "PARSE_ERROR") in outcomes
    ok = [r for r in lines if r["outcome"] == "OK" and r["method"] == "SendMessage"]
    assert {r["principal"] for r in ok} >= {"bearer:alice", "basic:carol", "apikey:ci"}
    assert all(r["task_id"] and r["duration_ms"] >= 0 for r in ok)

    # The agent's failure: its ref in the task's status message and in the log, no secret.
    failures = [r for r in records if r["message"].startswith("internal error ref=")]
    assert len(failures) == 3 and all("exception" in r for r in failures)
    assert all("[redacted]" in r["exception"]["message"] for r in failures)
    refs = [r["message"].split()[2].removeprefix("ref=") for r in failures]
    assert all(any(f"ref {ref}" in a for a in answers) for ref in refs)
