"""The `a2a_sdk:` agent spelling: what it loads, what it refuses, that a2a-sdk stays optional,
and the adapter's checks of an executor's events."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from gen import a2a_pb2 as pb
from service.agent import Agent, Caller, load_agent
from tests import sdk_executors

ROOT = pathlib.Path(__file__).resolve().parents[2]
HELLO = "a2a_sdk:tests.sdk_executors:HelloWorldExecutor"

HelloWorldExecutor = sdk_executors.HelloWorldExecutor
hello_instance = sdk_executors.HelloWorldExecutor()


def make_hello() -> sdk_executors.HelloWorldExecutor:
    return sdk_executors.HelloWorldExecutor()


class NotAnExecutor:
    def execute(self) -> None: ...


@pytest.mark.parametrize(
    "attr",
    ["HelloWorldExecutor", "hello_instance", "make_hello"],
    ids=["class", "instance", "factory"],
)
def test_executor_class_instance_or_factory(attr):
    from service.agents.a2a_sdk import SdkExecutorAgent

    agent = load_agent(f"a2a_sdk:tests.unit.test_sdk_adapter:{attr}")
    assert isinstance(agent, Agent) and isinstance(agent, SdkExecutorAgent)
    assert isinstance(agent.executor, sdk_executors.HelloWorldExecutor)


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("a2a_sdk:tests.unit.test_sdk_adapter:NotAnExecutor", "not an AgentExecutor"),
        ("a2a_sdk:tests.unit.test_sdk_adapter:nothing", "has no attribute 'nothing'"),
        ("a2a_sdk:tests.no_such_module:X", "cannot import module"),
    ],
)
def test_bad_specs_say_why(spec, said):
    with pytest.raises(ValueError, match=said):
        load_agent(spec)


def test_missing_a2a_sdk_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "a2a" or m.startswith("a2a.")] + ["a2a"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if a2a-sdk were not installed
    monkeypatch.delitem(sys.modules, "service.agents.a2a_sdk", raising=False)
    with pytest.raises(ValueError) as caught:
        load_agent(HELLO)
    assert "a2a-sdk" in str(caught.value) and ".[a2a-sdk]" in str(caught.value)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_startup_fails_clearly_without_a2a_sdk(tmp_path):
    done = run_python(
        "import sys; sys.modules['a2a'] = None\n"
        "from service.app.cli import main\n"
        f"sys.exit(main(['serve', '--agent', {HELLO!r}, '--grpc-port', '0', "
        f"'--http-port', '-1', '--data-dir', {str(tmp_path)!r}]))"
    )
    assert done.returncode != 0
    assert "a2a-sdk" in done.stderr and ".[a2a-sdk]" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_server_does_not_import_a2a_sdk():
    done = run_python(
        "import sys\n"
        "import service.app.server, service.app.cli, service.agent, gateway.server\n"
        "print(sorted(m for m in sys.modules if m == 'a2a' or m.startswith('a2a.')))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


class FakeContext:
    """The parts of a TurnContext the queue reads before emitting."""

    task_id = "t-1"
    context_id = "c-1"
    task = None
    caller = Caller()


@pytest.mark.parametrize(
    "event",
    [
        pb.Task(id="other", context_id="c-1"),
        pb.TaskStatusUpdateEvent(task_id="t-1", context_id="other"),
        pb.TaskArtifactUpdateEvent(task_id="other", context_id="c-1"),
    ],
)
async def test_events_of_another_task_are_refused(event):
    from service.agents.a2a_sdk import TurnQueue
    from service.protocol.errors import InvalidAgentResponseError

    queue = TurnQueue(FakeContext())  # type: ignore[arg-type]
    with pytest.raises(InvalidAgentResponseError):
        await queue.enqueue_event(event)
