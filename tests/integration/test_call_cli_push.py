"""`a2a-call push create|list|get|delete` and `send --push-url` against our real server on
loopback, over each binding: the configs made, shown (human and --json lines), deleted; a
send that carries a config has its events POSTed to a real receiver with the token and the
credentials; an agent without push answers PushNotificationNotSupported, exit 8 with a
message that says so. Also the permission prompt said once (the server's default prompt
already names the request)."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from tests.call_util import cli, lines, serve_for_cli

BINDINGS = ("jsonrpc", "rest", "grpc")
PUSH_TOKEN = "push-t0ken-" + "c" * 20
PUSH_SECRET = "push-s3cret-" + "d" * 20


class Hook:
    """A loopback receiver recording each POST (its headers, lower-case, and JSON body)."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], dict]] = []
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hook.posts.append(
                    ({k.lower(): v for k, v in self.headers.items()}, json.loads(body or b"{}"))
                )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def pushing(tmp_path_factory):
    proc = serve_for_cli(
        tmp_path_factory.mktemp("call-cli-push"),
        "push",
        "tests.agents:HumanLoopAgent",
        "--store",
        "memory:",
        "--push-notifications",
        "true",
        env={"A2A_PUSH_ALLOW_NETWORKS": "127.0.0.1/32", "A2A_PUSH_RETRY_BASE_SECONDS": "0.2"},
    )
    yield f"http://127.0.0.1:{proc.http_port}"
    proc.stop()


@pytest.fixture(scope="module")
def no_push(tmp_path_factory):
    proc = serve_for_cli(
        tmp_path_factory.mktemp("call-cli-nopush"),
        "nopush",
        "tests.permission_agents:PermissionAgent",
        "--store",
        "memory:",
    )
    yield f"http://127.0.0.1:{proc.http_port}"
    proc.stop()


@pytest.fixture
def hook():
    h = Hook()
    yield h
    h.close()


def _task(url: str, *words: str) -> str:
    done = cli("--json", url, *(words or ("echo", "x")))
    assert done.returncode == 0, done.stderr
    return lines(done.stdout)[0]["task"]["id"]


@pytest.mark.parametrize("binding", BINDINGS)
def test_push_create_list_get_delete(pushing, binding):
    task = _task(pushing)
    on = ("--binding", binding, pushing, "--task", task)
    made = cli(
        "push", "create", "--json", *on, "--config", "c1",
        "--push-url", "http://127.0.0.1:9/hook", "--push-token", PUSH_TOKEN,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    [config] = lines(made.stdout)
    assert config == {
        "id": "c1",
        "taskId": task,
        "url": "http://127.0.0.1:9/hook",
        "token": PUSH_TOKEN,
    }
    # the action word may come after the URL; auth scheme and credentials (from the env)
    other = cli(
        "push", *on, "create", "--push-url", "http://127.0.0.1:9/other",
        "--push-auth-scheme", "Bearer", env={"A2A_CALL_PUSH_CREDENTIALS": PUSH_SECRET},
    )  # fmt: skip
    assert other.returncode == 0, other.stderr
    assert other.stdout.startswith("created config ") and "auth Bearer" in other.stdout
    assert PUSH_SECRET not in other.stdout + other.stderr  # the human output hides secrets
    listed = cli("push", "list", "--json", *on)
    assert listed.returncode == 0, listed.stderr
    configs = lines(listed.stdout)[0]["configs"]
    assert {c["url"] for c in configs} == {"http://127.0.0.1:9/hook", "http://127.0.0.1:9/other"}
    [auth] = [c["authentication"] for c in configs if "authentication" in c]
    assert auth == {"scheme": "Bearer", "credentials": PUSH_SECRET}
    human = cli("push", "list", *on)
    assert human.returncode == 0 and "config c1  task " in human.stdout
    assert "token set" in human.stdout and PUSH_TOKEN not in human.stdout
    assert "2 push configs of task" in human.stderr
    got = cli("push", "get", "--json", *on, "--config", "c1")
    assert got.returncode == 0 and lines(got.stdout) == [config]
    gone = cli("push", "delete", "--json", *on, "--config", "c1")
    assert gone.returncode == 0, gone.stderr
    assert lines(gone.stdout) == [{"taskId": task, "id": "c1", "deleted": True}]
    missing = cli("push", "get", *on, "--config", "c1")
    assert missing.returncode == 8 and "c1 not found" in missing.stderr
    assert cli("push", "get", *on).returncode == 2  # no --config
    assert cli("push", "create", *on, "--push-url", "ftp://x/y").returncode == 2


@pytest.mark.parametrize("binding", BINDINGS)
def test_send_push_url_carries_the_config_and_events_arrive(pushing, hook, binding):
    sent = cli(
        "--json", "--binding", binding, pushing, "echo", "pushed",
        "--push-url", hook.url, "--push-token", PUSH_TOKEN,
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    task = lines(sent.stdout)[0]["task"]["id"]
    listed = cli("push", "list", "--json", "--binding", binding, pushing, "--task", task)
    [config] = lines(listed.stdout)[0]["configs"]
    assert config["url"] == hook.url and config["token"] == PUSH_TOKEN
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        states = [
            body.get("statusUpdate", {}).get("status", {}).get("state") for _, body in hook.posts
        ]
        if "TASK_STATE_COMPLETED" in states:
            break
        time.sleep(0.05)
    assert "TASK_STATE_COMPLETED" in states, hook.posts
    assert all(h["x-a2a-notification-token"] == PUSH_TOKEN for h, _ in hook.posts)


@pytest.mark.parametrize("binding", BINDINGS)
def test_push_not_supported_is_exit_8_and_says_so(no_push, binding):
    task = _task(no_push, "tool", "echo", "--approve")
    for args in (
        ("push", "list", "--binding", binding, no_push, "--task", task),
        ("push", "create", "--binding", binding, no_push, "--task", task,
         "--push-url", "http://127.0.0.1:9/h"),
        ("--binding", binding, no_push, "echo", "--push-url", "http://127.0.0.1:9/h"),
    ):  # fmt: skip
        result = cli(*args)
        assert result.returncode == 8, (args, result.stderr)
        assert "PushNotificationNotSupported: the agent takes no push notification" in (
            result.stderr
        )


def test_the_permission_request_is_said_once(no_push):
    # PermissionAgent leaves the prompt to the server: "The agent asks for permission to …"
    asked = cli(no_push, "tool", "make", "/srv/app")
    assert asked.returncode == 4, asked.stderr
    assert "permission: The agent asks" not in asked.stdout
    shown = [x for x in asked.stdout.splitlines() if x.startswith("The agent asks")]
    assert shown == ["The agent asks for permission to use make (/srv/app). Answer with a "
                     "permission decision: allow_once or deny."], asked.stdout  # fmt: skip
