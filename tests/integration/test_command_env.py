"""The command agent's program gets an allow-list of the server's environment, never its
secrets: a real server configured through its environment (credentials, exporter headers,
a key file) runs a program that prints its environment; only PATH, HOME, LANG, LC_*, TZ,
TMPDIR, A2A_OUTPUT_DIR and what `command_env` names arrive. Naming a secret is refused at
startup."""

from __future__ import annotations

import grpc

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.process import ServerProcess, run_serve

TOKEN = "bearer-token-never-in-the-program-0123"
API_KEY = "api-key-never-in-the-program-4567890"
OTLP_SECRET = "otlp-header-never-in-the-program-99"
OTEL_SECRET = "otel-header-never-in-the-program-77"
SECRETS = (TOKEN, API_KEY, OTLP_SECRET, OTEL_SECRET)


def printed_environment(task: pb.Task) -> dict[str, str]:
    text = "".join(part.text for artifact in task.artifacts for part in artifact.parts)
    return dict(line.partition("=")[::2] for line in text.splitlines() if "=" in line)


async def test_the_program_gets_the_allow_list_and_no_secret(tmp_path):
    keys = tmp_path / "api-keys"
    keys.write_text(f"ci={API_KEY}\n")
    temp = tmp_path / "tmp"
    temp.mkdir()
    server_env = {
        "A2A_AUTH_BEARER_TOKENS": f"ci={TOKEN}",
        "A2A_AUTH_API_KEYS_FILE": str(keys),
        "A2A_OTLP_HEADERS": f"x-api-key={OTLP_SECRET}",
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {OTEL_SECRET}",
        "API_KEYS_FILE_COPY": str(keys),  # a path to a secret file, not named: not passed
        "UNRELATED": "the server's business",
        "GREETING": "hello from the operator",
        "LANG": "C.UTF-8",
        "LC_TIME": "C",
        "TZ": "UTC",
        "TMPDIR": str(temp),
        "HOME": str(tmp_path),
        "A2A_COMMAND_ENV": "GREETING,MODE=report,NOT_SET_ANYWHERE",
    }
    server = ServerProcess(
        "--data-dir",
        str(tmp_path / "data"),
        "--store",
        "memory:",
        "--agent",
        "command",
        "--command",
        "env",
        env=server_env,
    ).start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = a2a_pb2_grpc.A2AServiceStub(channel)
            reply = await stub.SendMessage(
                pb.SendMessageRequest(message=user_message("x")),
                metadata=(("authorization", f"Bearer {TOKEN}"), ("a2a-version", "1.0")),
            )
    finally:
        assert server.stop() == 0
    assert reply.task.status.state == pb.TASK_STATE_COMPLETED
    env = printed_environment(reply.task)
    text = repr(env)
    for secret in (*SECRETS, str(keys)):
        assert secret not in text
    assert not [name for name in env if name.startswith("OTEL_")]
    assert [name for name in env if name.startswith("A2A_")] == ["A2A_OUTPUT_DIR"]
    assert "UNRELATED" not in env and "NOT_SET_ANYWHERE" not in env
    assert env["GREETING"] == "hello from the operator"
    assert env["MODE"] == "report"
    for name in ("PATH", "HOME", "LANG", "LC_TIME", "TZ", "TMPDIR"):
        assert env[name] == server.env[name], name
    allowed = {"PATH", "HOME", "LANG", "TZ", "TMPDIR", "A2A_OUTPUT_DIR", "GREETING", "MODE"}
    extra = {name for name in env if name not in allowed and not name.startswith("LC_")}
    assert extra == set()  # PYTHONPATH and the rest of the server's environment stay behind


def test_naming_a_secret_stops_startup(tmp_path):
    keys = tmp_path / "api-keys"
    keys.write_text(f"ci={API_KEY}\n")
    common = ("--data-dir", str(tmp_path / "data"), "--agent", "command", "--command", "env")
    for env in (
        {"A2A_COMMAND_ENV": "A2A_AUTH_BEARER_TOKENS", "A2A_AUTH_BEARER_TOKENS": f"ci={TOKEN}"},
        {"A2A_COMMAND_ENV": "otel_exporter_otlp_headers"},
        {"A2A_COMMAND_ENV": "KEYS", "KEYS": str(keys), "A2A_AUTH_API_KEYS_FILE": str(keys)},
        {"A2A_COMMAND_ENV": f"KEYS={keys}", "A2A_AUTH_API_KEYS_FILE": str(keys)},
    ):
        done = run_serve("--grpc-port", "0", "--http-port", "-1", *common, env=env)
        assert done.returncode == 2, done.stderr
        assert "command_env" in done.stderr, done.stderr
        for secret in SECRETS:
            assert secret not in done.stderr + done.stdout
