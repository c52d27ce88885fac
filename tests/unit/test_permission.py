"""The permission side-band's rules in-process: the policy and its settings, the answer
check as a pure function of the stored task, secret masking in the command agent's prompt,
and failing closed when an automatic decision cannot be recorded (a store that refuses the
commit carrying the audit record)."""

from __future__ import annotations

import asyncio

import pytest

from gen import a2a_pb2 as pb
from service.agent import NOT_RECORDED_MESSAGE, Caller
from service.agents.command import masked, summarise
from service.app.config import ConfigError, load
from service.engine.bus import InProcessBus
from service.engine.registry import Engine
from service.permission.envelope import AUDIT_KEY, check_answer, namespace_of
from service.permission.policy import PermissionPolicy, parse_rule, policy_from_settings
from service.protocol.errors import InvalidParamsError
from service.store import Scope, StoredEvent
from service.store.memory import MemoryTaskStore
from tests.conftest import user_message
from tests.permission_agents import PermissionAgent
from tests.permission_util import answer

SCOPE = Scope("acme", "alice")
WAIT = 5


def test_rules_first_match_wins_and_unmatched_tools_are_denied():
    policy = PermissionPolicy(
        "rules", tuple(parse_rule(r) for r in ["allow:read_*", "ask:read_secrets", "deny:*rm*"])
    )
    assert policy.decide("read_file").decision == "allow_once"
    assert policy.decide("read_file").rule == "allow:read_*"
    assert policy.decide("read_secrets").decision == "allow_once"  # the earlier rule wins
    assert policy.decide("shell_rm").decision == "deny"
    assert policy.decide("Read_file").decision == "deny"  # patterns are case-sensitive
    assert policy.decide("curl").rule == ""  # no rule matched: denied
    assert PermissionPolicy("rules", (parse_rule("ask:*"),)).decide("x") is None
    assert PermissionPolicy("ask").decide("anything") is None
    assert PermissionPolicy("auto_approve").decide("anything").decision == "allow_once"


@pytest.mark.parametrize(
    "env, problem",
    [
        ({"A2A_PERMISSION_MODE": "yolo"}, "permission_mode: expected one of ask, auto_approve"),
        ({"A2A_PERMISSION_MODE": "rules"}, 'permission_rules: permission_mode = "rules" needs'),
        (
            {"A2A_PERMISSION_MODE": "rules", "A2A_PERMISSION_RULES": "allow"},
            "permission_rules: 'allow' is not a rule",
        ),
        (
            {"A2A_PERMISSION_MODE": "rules", "A2A_PERMISSION_RULES": "maybe:x"},
            "permission_rules: 'maybe:x' is not a rule",
        ),
        ({"A2A_PERMISSION_RULES": "allow:x"}, "permission_rules: only used with permission_mode"),
    ],
)
def test_bad_permission_settings_stop_startup_naming_the_key(env, problem):
    with pytest.raises(ConfigError) as refused:
        load(env=env)
    assert str(refused.value).startswith(problem), refused.value


def test_permission_settings_from_the_environment():
    settings = load(
        env={
            "A2A_PERMISSION_MODE": "rules",
            "A2A_PERMISSION_RULES": "allow:read_*, deny:*",
            "A2A_COMMAND_APPROVAL": "true",
        }
    )
    policy = policy_from_settings(settings)
    assert [str(r) for r in policy.rules] == ["allow:read_*", "deny:*"]
    assert settings.command_approval is True
    assert load(env={}).permission_mode == "ask" and not load(env={}).command_approval


async def test_the_answer_check_needs_only_the_stored_task():
    store = MemoryTaskStore()
    engine = Engine(store, PermissionAgent(), InProcessBus())
    turn = await engine.send(SCOPE, user_message("tool shell /srv"), Caller("alice", "acme"))
    paused = await asyncio.wait_for(engine.wait(turn), WAIT)
    await engine.shutdown()
    # What any process would read from the store: bytes, parsed afresh.
    task = pb.Task.FromString((await store.get(SCOPE, paused.id)).SerializeToString())
    ours = namespace_of(task, "a2a_service")
    decided = check_answer(task, ours, answer(task, "deny"))
    assert decided is not None and decided.decision == "deny"
    with pytest.raises(InvalidParamsError) as refused:
        check_answer(task, ours, answer(task, inputId="other"))
    assert refused.value.field_violations[0][0] == "message.parts[0].data.inputId"
    assert check_answer(task, {}, user_message("hi", task_id=task.id)) is None  # nothing pending


def test_the_command_prompt_masks_secret_looking_values():
    line = (
        "deploy --token abc --password=hunter2 API_KEY=k1 https://bob:pw@example.com "
        "-H 'Authorization: Bearer xyz' --name prod"
    )
    out = masked(line)
    for secret in ("abc", "hunter2", "k1", "bob:pw", "xyz"):
        assert secret not in out, out
    assert "--name prod" in out and "--token ***" in out and "API_KEY=***" in out
    assert summarise("one\ntwo\n") == "stdin: 'one' (8 bytes, 2 lines)"
    assert len(summarise("x" * 500)) < 120


class AuditRefusingStore(MemoryTaskStore):
    """Refuses every commit whose snapshot carries a permission audit record."""

    async def save(
        self, scope: Scope, task: pb.Task, events: list[StoredEvent], snapshot=None, steady=False
    ) -> None:
        if AUDIT_KEY in namespace_of(task, "a2a_service"):
            raise RuntimeError("disk full")
        await super().save(scope, task, events, snapshot=snapshot, steady=steady)


async def test_an_automatic_allow_that_cannot_be_recorded_is_not_acted_on():
    store = AuditRefusingStore()
    engine = Engine(
        store, PermissionAgent(), InProcessBus(), permissions=PermissionPolicy("auto_approve")
    )
    turn = await engine.send(SCOPE, user_message("tool shell /srv"), Caller("alice", "acme"))
    with pytest.raises(Exception, match="could not be stored"):  # the caller learns it failed
        await asyncio.wait_for(engine.wait(turn), WAIT)
    for _ in range(200):
        task = await store.get(SCOPE, turn.run.task_id)
        if task is not None and task.status.state == pb.TASK_STATE_FAILED:
            break
        await asyncio.sleep(0.01)
    assert task.status.state == pb.TASK_STATE_FAILED
    assert task.status.message.parts[0].text == NOT_RECORDED_MESSAGE
    assert len(task.artifacts) == 0  # the tool never ran
    assert AUDIT_KEY not in namespace_of(task, "a2a_service")
    await engine.shutdown()
