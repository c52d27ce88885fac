"""The limit and retention parts on their own: token buckets (with a fake clock), slots,
durations and their settings, the purge hooks, idle workspace bindings."""

from __future__ import annotations

import logging

import pytest

from gen import a2a_pb2 as pb
from service.app import config
from service.engine.limits import RateLimiter, Slots
from service.engine.retention import TaskRetention, parse_duration
from service.inputs.workspace import Workspaces
from service.protocol.errors import OverloadedError
from service.protocol.timeutil import micros_to_timestamp
from service.store import Scope
from service.store.memory import MemoryTaskStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_allows_its_burst_then_the_rate_per_principal():
    clock = Clock()
    limiter = RateLimiter(2.0, burst=3, clock=clock)
    for _ in range(3):
        limiter.check("alice")
    with pytest.raises(OverloadedError) as refused:
        limiter.check("alice")
    assert refused.value.metadata == {"setting": "rate_limit_per_principal", "limit": "2"}
    assert refused.value.retry_after == pytest.approx(0.5)  # one token at 2 per second
    limiter.check("bob")  # a bucket of his own
    clock.now += 0.5
    limiter.check("alice")
    with pytest.raises(OverloadedError):
        limiter.check("alice")
    clock.now += 100  # refills to the burst, not beyond
    for _ in range(3):
        limiter.check("alice")
    with pytest.raises(OverloadedError):
        limiter.check("alice")


def test_the_default_burst_is_one_second_of_requests():
    limiter = RateLimiter(5.0, clock=Clock())
    for _ in range(5):
        limiter.check("")
    with pytest.raises(OverloadedError):
        limiter.check("")
    assert RateLimiter(0.2).burst == 1  # at least one request


def test_buckets_of_idle_principals_are_forgotten(monkeypatch):
    from service.engine import limits

    monkeypatch.setattr(limits, "_MAX_BUCKETS", 10)
    clock = Clock()
    limiter = RateLimiter(1.0, burst=1, clock=clock)
    for i in range(10):
        limiter.check(f"p{i}")
    clock.now += 5  # all refilled
    limiter.check("new")
    assert len(limiter._buckets) == 1
    for i in range(30):  # all busy at once: still bounded
        limiter.check(f"q{i}")
    assert len(limiter._buckets) <= 11


def test_slots_limit_in_total_and_per_key_and_are_given_back():
    slots = Slots(3, 2, ("max_concurrent_turns", "max_concurrent_turns_per_principal"), "turns")
    slots.take("a")
    slots.take("a")
    with pytest.raises(OverloadedError) as refused:
        slots.take("a")
    assert refused.value.metadata["setting"] == "max_concurrent_turns_per_principal"
    slots.take("b")
    with pytest.raises(OverloadedError) as refused:
        slots.take("c")
    assert refused.value.metadata == {"setting": "max_concurrent_turns", "limit": "3"}
    assert refused.value.retry_after == 1.0
    slots.give("a")
    slots.take("c")
    for key in ("a", "b", "c"):
        slots.give(key)
    assert slots.active == 0 and slots.by_key == {}
    assert not Slots(0, 0, ("x", "y"), "turns").enabled


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("", 0),
        ("0", 0),
        ("3600", 3600),
        ("90s", 90),
        ("15m", 900),
        ("12h", 43200),
        ("30d", 2592000),
        ("1.5h", 5400),
        (" 2D ", 172800),
    ],
)
def test_durations(text, seconds):
    assert parse_duration(text, "task_retention") == seconds


@pytest.mark.parametrize("text", ["30 days", "-1d", "1w", "d", "1e3"])
def test_bad_durations_name_the_key(text):
    with pytest.raises(ValueError, match="task_retention: expected a duration"):
        parse_duration(text, "task_retention")


def test_settings_keys_load_and_are_checked():
    s = config.load(
        env={
            "A2A_TASK_RETENTION": "30d",
            "A2A_CONTEXT_IDLE_TIMEOUT": "2h",
            "A2A_MAX_CONCURRENT_TURNS": "10",
            "A2A_MAX_CONCURRENT_TURNS_PER_PRINCIPAL": "2",
            "A2A_MAX_STREAMS_PER_PRINCIPAL": "4",
            "A2A_RATE_LIMIT_PER_PRINCIPAL": "50",
            "A2A_RATE_LIMIT_BURST": "100",
            "A2A_TURN_INACTIVITY_TIMEOUT_SECONDS": "300",
            "A2A_MAX_TURN_SECONDS": "3600",
        }
    )
    assert (s.task_retention, s.context_idle_timeout) == ("30d", "2h")
    assert (s.max_concurrent_turns, s.max_concurrent_turns_per_principal) == (10, 2)
    assert (s.max_streams_per_principal, s.rate_limit_per_principal, s.rate_limit_burst) == (
        4,
        50.0,
        100,
    )
    assert (s.turn_inactivity_timeout_seconds, s.max_turn_seconds) == (300.0, 3600.0)
    defaults = config.load(env={})
    assert defaults.task_retention == "" and defaults.rate_limit_per_principal == 0
    assert defaults.max_concurrent_turns == 0 and defaults.max_turn_seconds == 0


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"A2A_TASK_RETENTION": "forever"}, "task_retention: expected a duration"),
        ({"A2A_CONTEXT_IDLE_TIMEOUT": "1y"}, "context_idle_timeout: expected a duration"),
        ({"A2A_MAX_CONCURRENT_TURNS": "-1"}, "max_concurrent_turns: must be 0"),
        ({"A2A_RATE_LIMIT_PER_PRINCIPAL": "-5"}, "rate_limit_per_principal: must be between"),
        ({"A2A_RATE_LIMIT_BURST": "10"}, "rate_limit_burst: set rate_limit_per_principal"),
        ({"A2A_MAX_TURN_SECONDS": "-1"}, "max_turn_seconds: must be between"),
    ],
)
def test_bad_limit_settings_are_refused_naming_the_key(env, fragment):
    with pytest.raises(config.ConfigError, match=fragment):
        config.load(env=env)


async def test_a_failing_purge_hook_is_logged_and_the_others_still_run(caplog):
    store = MemoryTaskStore()
    for i in range(5):
        task = pb.Task(id=f"t{i}", context_id="c")
        task.status.state = pb.TASK_STATE_COMPLETED
        micros_to_timestamp(1_000_000, task.status.timestamp)
        await store.save(Scope("", "a"), task, [])
    seen: list[tuple[Scope, str]] = []

    async def broken(batch: list[tuple[Scope, str]]) -> None:
        raise RuntimeError("blob store down")

    async def release(batch: list[tuple[Scope, str]]) -> None:
        seen.extend(batch)

    retention = TaskRetention(store, 60, [broken, release], batch=2)
    with caplog.at_level(logging.ERROR, logger="service.retention"):
        assert await retention.sweep() == 5
    assert sorted(task_id for _, task_id in seen) == [f"t{i}" for i in range(5)]
    assert caplog.text.count("a purge hook failed") == 3  # batches of 2, 2 and 1
    assert await retention.sweep() == 0  # nothing left; hooks not called for nothing
    assert len(seen) == 5


def test_idle_workspace_bindings_are_forgotten(monkeypatch, tmp_path):
    from service.inputs import workspace

    now = [1000.0]
    monkeypatch.setattr(workspace.time, "monotonic", lambda: now[0])
    spaces = Workspaces([str(tmp_path)])
    scope = Scope("", "a")
    spaces.bind(scope, "old", str(tmp_path))
    now[0] += 50
    spaces.bind(scope, "new", "")
    now[0] += 20
    assert spaces.evict_idle(60) == 1  # "old" was bound 70 s ago, "new" 20 s ago
    assert list(spaces._bound) == [(scope, "new")]
    spaces.bind(scope, "old", "")  # a context forgotten may be bound again
    assert spaces.evict_idle(1000) == 0
