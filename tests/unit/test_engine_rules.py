"""The engine's protocol rules, in-process: an `Engine` on the memory store with small agents,
no server and no binding. Follow-up legality, cancellation, event order, stream resume,
recovery after a restart and shutdown. (The same rules over gRPC: tests/integration/
test_engine_grpc.py; races with a slowed store: tests/integration/test_engine_races.py.)"""

from __future__ import annotations

import asyncio

import pytest

from gen import a2a_pb2 as pb
from service.agent import Caller, TurnContext
from service.engine.bus import InProcessBus
from service.engine.registry import RESTART_MESSAGE, SHUTDOWN_MESSAGE, Engine, Turn
from service.engine.run import TaskRun
from service.protocol.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from service.store import Scope, StoredEvent
from service.store.base import encoded
from service.store.memory import MemoryTaskStore
from tests.agents import ScriptedAgent
from tests.conftest import user_message

SCOPE = Scope()
CALLER = Caller()
WAIT = 5  # seconds: a rule that hangs fails instead of stalling the suite


# ------------------------------------------------------------------------------ helpers


@pytest.fixture
async def engine():
    engine = Engine(MemoryTaskStore(), ScriptedAgent(), InProcessBus())
    yield engine
    await engine.shutdown()


async def start(engine: Engine, text: str, **fields) -> Turn:
    """A new task whose creation is committed (returnImmediately); its agent is running."""
    turn = await engine.send(SCOPE, user_message(text, **fields), CALLER, return_immediately=True)
    await asyncio.wait_for(engine.accepted(turn.run), WAIT)
    return turn


async def settle(engine: Engine, text: str, **fields) -> pb.Task:
    """Send and wait until the turn settles (terminal or interrupted); the task as returned."""
    turn = await engine.send(SCOPE, user_message(text, **fields), CALLER)
    outcome = await asyncio.wait_for(engine.wait(turn), WAIT)
    assert isinstance(outcome, pb.Task), outcome
    return pb.Task.FromString(outcome.SerializeToString())  # as it was then, not the live one


async def stored(engine: Engine, task_id: str, scope: Scope = SCOPE) -> pb.Task:
    task = await engine.store.get(scope, task_id)
    assert task is not None, task_id
    return task


async def until_stored(engine: Engine, task_id: str, state: int) -> pb.Task:
    """Wait until the store holds the task in `state`."""
    for _ in range(WAIT * 100):
        task = await engine.store.get(SCOPE, task_id)
        if task is not None and task.status.state == state:
            return task
        await asyncio.sleep(0.01)
    raise AssertionError(f"task {task_id} never reached {pb.TaskState.Name(state)} in the store")


async def until_last_seq(engine: Engine, task_id: str, seq: int) -> None:
    for _ in range(WAIT * 100):
        if await engine.store.last_seq(SCOPE, task_id) >= seq:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"task {task_id} never reached event {seq} in the store")


def status_text(task: pb.Task) -> str:
    return "".join(p.text for p in task.status.message.parts)


def describe(event: pb.StreamResponse) -> str:
    """A short, comparable name of an event: `task`, `artifact`, or the state it sets."""
    kind = event.WhichOneof("payload")
    if kind == "status_update":
        return pb.TaskState.Name(event.status_update.status.state)
    if kind == "artifact_update":
        return "artifact"
    return kind


async def read(stream, n: int | None = None) -> list[tuple[int | None, str]]:
    """(seq, event name) of the next `n` events of an EventStream, or of all until its end."""
    got: list[tuple[int | None, str]] = []
    while n is None or len(got) < n:
        try:
            event = await asyncio.wait_for(stream.__anext__(), WAIT)
        except StopAsyncIteration:
            break
        got.append((stream.seq, describe(event)))
    return got


class Watched:
    """Reports progress, then works until canceled; counts the turns it started and the
    cancellations it saw."""

    name = "watched"

    def __init__(self) -> None:
        self.started = 0
        self.canceled = 0

    async def run(self, ctx: TurnContext) -> None:
        self.started += 1
        await ctx.working("busy")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.canceled += 1
            raise


class Gated:
    """Two progress steps, then waits for `gate`, then one artifact (the engine completes it)."""

    name = "gated"

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def run(self, ctx: TurnContext) -> None:
        await ctx.working("step 1")
        await ctx.working("step 2")
        await self.gate.wait()
        await ctx.artifact("done", name="result")


class Chunks:
    """One artifact in `total` chunks, yielding to the loop between them; after the first
    `pause_at` chunks it waits for `gate`."""

    name = "chunks"

    def __init__(self, total: int, pause_at: int) -> None:
        self.total, self.pause_at = total, pause_at
        self.gate = asyncio.Event()

    async def run(self, ctx: TurnContext) -> None:
        artifact = None
        for i in range(self.total):
            if i == self.pause_at:
                await self.gate.wait()
            artifact = await ctx.artifact(f"c{i}", artifact_id=artifact, append=i > 0)
            await asyncio.sleep(0)


# ---------------------------------------------------------------------- follow-up legality


async def test_a_follow_up_to_a_working_task_is_refused_and_changes_nothing(engine):
    turn = await engine.send(SCOPE, user_message("hang"), CALLER, return_immediately=True)
    task_id = turn.run.task_id
    # Right after the start and while it works: the same answer.
    with pytest.raises(UnsupportedOperationError) as early:
        await engine.send(SCOPE, user_message("too early", task_id=task_id), CALLER)
    assert early.value.message == "Task is already working."
    before = await until_stored(engine, task_id, pb.TASK_STATE_WORKING)
    seq = await engine.store.last_seq(SCOPE, task_id)
    with pytest.raises(UnsupportedOperationError) as refused:
        await engine.send(SCOPE, user_message("more", task_id=task_id), CALLER)
    assert refused.value.message == "Task is already working."
    await asyncio.sleep(0.05)
    now = await engine.get(SCOPE, task_id)
    assert now.status.state == pb.TASK_STATE_WORKING
    assert [m.message_id for m in now.history] == [m.message_id for m in before.history]
    assert await engine.store.last_seq(SCOPE, task_id) == seq


@pytest.mark.parametrize(
    ("text", "state"),
    [
        ("echo hi", pb.TASK_STATE_COMPLETED),
        ("fail", pb.TASK_STATE_FAILED),
        ("reject", pb.TASK_STATE_REJECTED),
        ("hang", pb.TASK_STATE_CANCELED),
    ],
)
async def test_a_follow_up_to_a_terminal_task_is_refused_naming_the_state(engine, text, state):
    if state == pb.TASK_STATE_CANCELED:
        task_id = (await start(engine, text)).run.task_id
        await engine.cancel(SCOPE, task_id)
    else:
        task_id = (await settle(engine, text)).id
    before = await stored(engine, task_id)
    assert before.status.state == state
    seq = await engine.store.last_seq(SCOPE, task_id)
    with pytest.raises(UnsupportedOperationError) as refused:
        await engine.send(SCOPE, user_message("again", task_id=task_id), CALLER)
    assert pb.TaskState.Name(state) in refused.value.message
    assert task_id in refused.value.message
    assert refused.value.message != "Task is already working."
    assert await stored(engine, task_id) == before
    assert await engine.store.last_seq(SCOPE, task_id) == seq


@pytest.mark.parametrize(
    ("text", "interrupted", "answer"),
    [
        ("input more please", pb.TASK_STATE_INPUT_REQUIRED, "follow-up: the answer"),
        ("auth", pb.TASK_STATE_AUTH_REQUIRED, "follow-up: the answer"),
        ("ask what?", pb.TASK_STATE_INPUT_REQUIRED, "you said: the answer"),  # paused mid-turn
    ],
)
async def test_a_follow_up_to_an_interrupted_task_resumes_it(engine, text, interrupted, answer):
    first = await settle(engine, text)
    assert first.status.state == interrupted
    resumed = await settle(engine, "the answer", task_id=first.id, message_id="follow-1")
    assert resumed.id == first.id and resumed.context_id == first.context_id
    assert resumed.status.state == pb.TASK_STATE_COMPLETED
    assert [p.text for p in resumed.artifacts[-1].parts] == [answer]
    assert "follow-1" in [m.message_id for m in resumed.history]
    assert (await stored(engine, first.id)).status.state == pb.TASK_STATE_COMPLETED


async def test_a_follow_up_naming_another_context_is_invalid_params(engine):
    first = await settle(engine, "input more please")
    with pytest.raises(InvalidParamsError) as refused:
        await engine.send(
            SCOPE, user_message("x", task_id=first.id, context_id="another-context"), CALLER
        )
    assert [field for field, _ in refused.value.field_violations] == ["message.contextId"]
    assert first.context_id in refused.value.message  # says which context to send
    assert (await stored(engine, first.id)).status.state == pb.TASK_STATE_INPUT_REQUIRED
    # The task's own context, or none, is accepted.
    resumed = await settle(engine, "ok", task_id=first.id, context_id=first.context_id)
    assert resumed.status.state == pb.TASK_STATE_COMPLETED


async def test_a_follow_up_to_an_unknown_task_is_not_found(engine):
    with pytest.raises(TaskNotFoundError):
        await engine.send(SCOPE, user_message("x", task_id="no-such-task"), CALLER)
    other = await settle(engine, "input more please")
    with pytest.raises(TaskNotFoundError):  # another caller's task is unknown to this one
        await engine.send(Scope(owner="someone-else"), user_message("x", task_id=other.id), CALLER)


# ------------------------------------------------------------------------------- cancel


async def test_cancel_a_running_task():
    agent = Watched()
    engine = Engine(MemoryTaskStore(), agent, InProcessBus())
    try:
        turn = await start(engine, "work")
        task_id = turn.run.task_id
        await until_stored(engine, task_id, pb.TASK_STATE_WORKING)
        canceled = await asyncio.wait_for(engine.cancel(SCOPE, task_id), WAIT)
        assert canceled.status.state == pb.TASK_STATE_CANCELED
        assert status_text(canceled) == "The task was canceled."
        assert agent.canceled == 1  # the agent saw CancelledError
        assert (await stored(engine, task_id)).status.state == pb.TASK_STATE_CANCELED
        outcome = await asyncio.wait_for(engine.wait(turn), WAIT)  # a waiting caller is told
        assert outcome.status.state == pb.TASK_STATE_CANCELED
        with pytest.raises(TaskNotCancelableError) as again:
            await engine.cancel(SCOPE, task_id)
        assert "TASK_STATE_CANCELED" in again.value.message
    finally:
        await engine.shutdown()


async def test_cancel_right_after_start_cancels():
    agent = Watched()
    engine = Engine(MemoryTaskStore(), agent, InProcessBus())
    try:
        turn = await engine.send(SCOPE, user_message("work"), CALLER, return_immediately=True)
        # Awaited directly (no wait_for, whose task would let the agent take its first step).
        canceled = await engine.cancel(SCOPE, turn.run.task_id)
        assert canceled.status.state == pb.TASK_STATE_CANCELED
        task = await stored(engine, turn.run.task_id)
        assert task.status.state == pb.TASK_STATE_CANCELED
        assert status_text(task) == "The task was canceled."
        assert agent.canceled == agent.started  # if the agent got to start, it was stopped
        await asyncio.sleep(0.05)
        assert (await stored(engine, turn.run.task_id)).status.state == pb.TASK_STATE_CANCELED
    finally:
        await engine.shutdown()


async def test_cancel_interrupted_tasks(engine):
    for text in ("input more please", "ask what?", "auth"):
        task = await settle(engine, text)
        canceled = await asyncio.wait_for(engine.cancel(SCOPE, task.id), WAIT)
        assert canceled.status.state == pb.TASK_STATE_CANCELED, text
        assert (await stored(engine, task.id)).status.state == pb.TASK_STATE_CANCELED, text


async def test_cancel_a_terminal_or_unknown_task_is_refused(engine):
    done = await settle(engine, "echo hi")
    seq = await engine.store.last_seq(SCOPE, done.id)
    with pytest.raises(TaskNotCancelableError) as refused:
        await engine.cancel(SCOPE, done.id)
    assert "TASK_STATE_COMPLETED" in refused.value.message and done.id in refused.value.message
    assert (await stored(engine, done.id)).status.state == pb.TASK_STATE_COMPLETED
    assert await engine.store.last_seq(SCOPE, done.id) == seq
    with pytest.raises(TaskNotFoundError):
        await engine.cancel(SCOPE, "no-such-task")


# ------------------------------------------------------------------------------ ordering


class BatchRecordingStore(MemoryTaskStore):
    """Records the sequence numbers of every committed batch; each commit takes a moment, so
    a busy agent's events spread over several batches."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[int]] = []

    async def save(
        self, scope: Scope, task: pb.Task, events: list[StoredEvent], snapshot=None, steady=False
    ) -> None:
        await super().save(scope, task, events, snapshot=snapshot, steady=steady)
        self.batches.append([e.seq for e in events])
        await asyncio.sleep(0.002)


async def test_events_are_committed_in_order_and_subscribers_see_every_one():
    store = BatchRecordingStore()
    agent = Chunks(total=30, pause_at=10)
    engine = Engine(store, agent, InProcessBus())
    try:
        turn = await engine.send(SCOPE, user_message("go"), CALLER, stream=True)
        task_id = turn.run.task_id
        stream = turn.events
        seen: list[int] = []
        kinds: list[str] = []
        late = None
        async for event in stream:
            seen.append(stream.seq)
            kinds.append(describe(event))
            # Published only once committed.
            assert await store.last_seq(SCOPE, task_id) >= stream.seq
            if len(seen) == 5:  # the agent is held at its 10th chunk: a subscriber comes in
                late = await engine.subscribe(SCOPE, task_id)
                agent.gate.set()
        # task snapshot, WORKING, 30 chunks, COMPLETED
        assert seen == list(range(1, 34))
        assert kinds == ["task", "TASK_STATE_WORKING"] + ["artifact"] * 30 + [
            "TASK_STATE_COMPLETED"
        ]
        committed = [seq for batch in store.batches for seq in batch]
        assert committed == list(range(1, 34))  # every event once, in order
        assert len(store.batches) > 1  # (the order held across several commits)
        stored_seqs = [e.seq for e in await store.events_after(SCOPE, task_id, 0)]
        assert stored_seqs == list(range(1, 34))
        # A subscriber that came in later: the task as it was, then every later event.
        assert late is not None
        got = await read(late)
        first_seq, first_kind = got[0]
        assert first_kind == "task" and first_seq >= 5
        assert [seq for seq, _ in got[1:]] == list(range(first_seq + 1, 34))
        assert got[-1][1] == "TASK_STATE_COMPLETED"
    finally:
        await engine.shutdown()


class HeldStore(MemoryTaskStore):
    """Commits wait while `open` is clear."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()
        self.open.set()

    async def save(
        self, scope: Scope, task: pb.Task, events: list[StoredEvent], snapshot=None, steady=False
    ) -> None:
        now = pb.Task.FromString(encoded(task, snapshot))  # as it is now
        await self.open.wait()
        await super().save(scope, now, events)


async def test_a_subscriber_that_joins_before_events_are_committed_sees_each_once():
    store = HeldStore()
    agent = Gated()
    engine = Engine(store, agent, InProcessBus())
    try:
        store.open.clear()
        turn = await engine.send(SCOPE, user_message("go"), CALLER, return_immediately=True)
        task_id = turn.run.task_id
        for _ in range(WAIT * 100):  # the agent took both steps; nothing is committed yet
            live = await engine.get(SCOPE, task_id)
            if status_text(live) == "step 2":
                break
            await asyncio.sleep(0.01)
        assert status_text(live) == "step 2"
        assert await store.last_seq(SCOPE, task_id) == 0
        joined = await engine.subscribe(SCOPE, task_id)
        store.open.set()  # events 1-3 are committed and published: the snapshot covered them
        assert await read(joined, 1) == [(3, "task")]
        agent.gate.set()
        assert await read(joined) == [(4, "artifact"), (5, "TASK_STATE_COMPLETED")]
    finally:
        store.open.set()
        await engine.shutdown()


# -------------------------------------------------------------------------------- resume


async def test_resume_starts_with_the_current_task_then_replays_stored_and_live_events():
    agent = Gated()
    engine = Engine(MemoryTaskStore(), agent, InProcessBus())
    try:
        turn = await start(engine, "go")
        task_id = turn.run.task_id
        await until_last_seq(engine, task_id, 3)  # snapshot, step 1, step 2: now waiting
        resumed = await engine.subscribe(SCOPE, task_id, after_seq=1)
        from_latest = await engine.subscribe(SCOPE, task_id, after_seq=3)
        # The current task first (numbered with the last event it includes), then every
        # event after the resume point, those the snapshot includes too.
        replayed = await read(resumed, 3)
        assert replayed == [(3, "task"), (2, "TASK_STATE_WORKING"), (3, "TASK_STATE_WORKING")]
        assert await read(from_latest, 1) == [(3, "task")]
        agent.gate.set()
        assert await read(resumed) == [(4, "artifact"), (5, "TASK_STATE_COMPLETED")]
        assert await read(from_latest) == [(4, "artifact"), (5, "TASK_STATE_COMPLETED")]
        await until_stored(engine, task_id, pb.TASK_STATE_COMPLETED)
        # Once the task is over, resuming replays from the store alone, after its snapshot.
        assert await read(await engine.subscribe(SCOPE, task_id, after_seq=2)) == [
            (5, "task"),
            (3, "TASK_STATE_WORKING"),
            (4, "artifact"),
            (5, "TASK_STATE_COMPLETED"),
        ]
        # Resumed at the end: the final task alone.
        assert await read(await engine.subscribe(SCOPE, task_id, after_seq=5)) == [(5, "task")]
        with pytest.raises(UnsupportedOperationError):  # not resuming: nothing to subscribe to
            await engine.subscribe(SCOPE, task_id)
    finally:
        await engine.shutdown()


async def test_resume_past_the_latest_event_is_invalid_params_on_last_event_id(engine):
    live = (await start(engine, "hang")).run.task_id
    await until_stored(engine, live, pb.TASK_STATE_WORKING)
    latest = await engine.store.last_seq(SCOPE, live)
    done = await settle(engine, "echo hi")
    done_latest = await engine.store.last_seq(SCOPE, done.id)
    for task_id, after, newest in (
        (live, latest + 1, latest),
        (done.id, done_latest + 1, done_latest),
        (done.id, 10**6, done_latest),
    ):
        with pytest.raises(InvalidParamsError) as refused:
            await engine.subscribe(SCOPE, task_id, after_seq=after)
        assert [field for field, _ in refused.value.field_violations] == ["Last-Event-ID"]
        assert f"latest event ({newest})" in refused.value.message
    # At the latest event exactly is fine: the final task, then the end.
    assert await read(await engine.subscribe(SCOPE, done.id, after_seq=done_latest)) == [
        (done_latest, "task")
    ]


# ------------------------------------------------------------- subscriptions through a pause


@pytest.mark.parametrize(
    ("text", "paused_state", "answer"),
    [
        ("input more please", pb.TASK_STATE_INPUT_REQUIRED, "follow-up: the answer"),  # turn ended
        ("auth", pb.TASK_STATE_AUTH_REQUIRED, "follow-up: the answer"),  # turn ended
        ("ask what?", pb.TASK_STATE_INPUT_REQUIRED, "you said: the answer"),  # agent in ctx.ask()
    ],
)
async def test_a_subscription_opened_while_paused_lasts_until_the_task_is_terminal(
    engine, text, paused_state, answer
):
    paused = await settle(engine, text)
    assert paused.status.state == paused_state
    latest = await engine.store.last_seq(SCOPE, paused.id)
    subscribed = await engine.subscribe(SCOPE, paused.id)
    resumed = await engine.subscribe(SCOPE, paused.id, after_seq=latest - 1)
    assert await read(subscribed, 1) == [(latest, "task")]  # the paused task, still open
    assert await read(resumed, 2) == [(latest, "task"), (latest, pb.TaskState.Name(paused_state))]
    if text.startswith("ask"):
        assert (SCOPE, paused.id) in engine.runs  # the agent waits in ctx.ask()
    else:
        assert (SCOPE, paused.id) not in engine.runs  # nobody runs it: the next turn is a new run
    done = await settle(engine, "the answer", task_id=paused.id)
    assert done.status.state == pb.TASK_STATE_COMPLETED
    expected = [
        (latest + 1, "TASK_STATE_WORKING"),
        (latest + 2, "artifact"),
        (latest + 3, "TASK_STATE_COMPLETED"),
    ]
    assert await read(subscribed) == expected  # ... and then the end
    assert await read(resumed) == expected


class Interview:
    """Pauses twice: the first turn ends INPUT_REQUIRED; the follow-up turn asks once more
    in ctx.ask(), then answers and completes."""

    name = "interview"

    async def run(self, ctx: TurnContext) -> None:
        if ctx.task is None:
            await ctx.require_input("first question")
            return
        first = ctx.text
        second = await ctx.ask("second question")
        await ctx.artifact(f"{first} / {second.parts[0].text}", name="answers")


async def test_a_subscription_from_before_the_pause_hears_every_turn_once():
    engine = Engine(MemoryTaskStore(), Interview(), InProcessBus())
    try:
        turn = await engine.send(SCOPE, user_message("hello"), CALLER, stream=True)
        assert turn.events is not None
        streamed = await read(turn.events)  # SendStreamingMessage ends at the pause
        assert [name for _, name in streamed][-1] == "TASK_STATE_INPUT_REQUIRED"
        task_id = turn.run.task_id
        whole = await engine.subscribe(SCOPE, task_id, after_seq=0)
        current = await read(whole, 1)  # the task as it is now, then the replay
        assert current == [(len(streamed), "task")]
        assert await read(whole, len(streamed)) == streamed  # replayed from the store
        for answer in ("one", "two"):  # a new turn that pauses in ctx.ask(), then its answer
            follow = await engine.send(
                SCOPE, user_message(answer, task_id=task_id), CALLER, stream=True
            )
            assert follow.events is not None
            await read(follow.events)
        tail = await read(whole)
        assert [seq for seq, _ in tail] == list(
            range(len(streamed) + 1, len(streamed) + 1 + len(tail))
        )  # no gap, no duplicate
        assert [name for _, name in tail] == [
            "TASK_STATE_WORKING",
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_WORKING",
            "artifact",
            "TASK_STATE_COMPLETED",
        ]
        done = await engine.get(SCOPE, task_id)
        assert [p.text for p in done.artifacts[0].parts] == ["one / two"]
    finally:
        await engine.shutdown()


async def test_a_paused_tasks_subscription_ends_with_the_error_at_drain(engine):
    paused = await settle(engine, "input more please")
    subscribed = await engine.subscribe(SCOPE, paused.id)
    assert await read(subscribed, 1) == [(await engine.last_seq(SCOPE, paused.id), "task")]
    assert engine.end_streams(RuntimeError("shutting down")) == 1
    with pytest.raises(RuntimeError, match="shutting down"):
        await asyncio.wait_for(subscribed.__anext__(), WAIT)


async def test_a_canceled_paused_task_ends_its_subscription(engine):
    paused = await settle(engine, "ask what?")
    subscribed = await engine.subscribe(SCOPE, paused.id)
    await read(subscribed, 1)
    await engine.cancel(SCOPE, paused.id)
    assert [name for _, name in await read(subscribed)] == ["TASK_STATE_CANCELED"]


# ----------------------------------------------------------------------- restart recovery


async def _leave_in_store(store: MemoryTaskStore, scope: Scope, task_id: str, state: int) -> None:
    """A task as a process that died would have left it: snapshot event, then its state."""
    task = pb.Task(id=task_id, context_id=f"ctx-{task_id}")
    task.status.state = pb.TASK_STATE_SUBMITTED
    task.history.append(user_message("hello", task_id=task_id, context_id=task.context_id))
    events = [StoredEvent(1, pb.StreamResponse(task=task))]
    if state != pb.TASK_STATE_SUBMITTED:
        update = pb.StreamResponse()
        update.status_update.task_id = task_id
        update.status_update.context_id = task.context_id
        update.status_update.status.state = state
        events.append(StoredEvent(2, update))
        task.status.state = state
    await store.save(scope, task, events)


async def test_recover_fails_the_tasks_a_dead_process_left_running():
    store = MemoryTaskStore()
    tenant = Scope(tenant="acme", owner="alice")
    await _leave_in_store(store, SCOPE, "working", pb.TASK_STATE_WORKING)
    await _leave_in_store(store, tenant, "submitted", pb.TASK_STATE_SUBMITTED)
    await _leave_in_store(store, SCOPE, "waiting", pb.TASK_STATE_INPUT_REQUIRED)
    await _leave_in_store(store, SCOPE, "done", pb.TASK_STATE_COMPLETED)
    waiting_before = await store.get(SCOPE, "waiting")
    done_before = await store.get(SCOPE, "done")
    engine = Engine(store, ScriptedAgent(), InProcessBus())
    try:
        assert await engine.recover() == 2
        for scope, task_id, seq in ((SCOPE, "working", 3), (tenant, "submitted", 2)):
            task = await stored(engine, task_id, scope)
            assert task.status.state == pb.TASK_STATE_FAILED, task_id
            assert status_text(task) == RESTART_MESSAGE
            assert task.status.message.role == pb.ROLE_AGENT
            events = await store.events_after(scope, task_id, 0)
            assert [e.seq for e in events] == list(range(1, seq + 1))  # numbering goes on
            assert describe(events[-1].event) == "TASK_STATE_FAILED"
        assert await store.get(SCOPE, "submitted") is None  # still only in its own scope
        assert await store.get(SCOPE, "waiting") == waiting_before  # interrupted: kept
        assert await store.get(SCOPE, "done") == done_before
        assert await engine.recover() == 0  # nothing left running
        with pytest.raises(UnsupportedOperationError, match="TASK_STATE_FAILED"):
            await engine.send(SCOPE, user_message("retry", task_id="working"), CALLER)
        resumed = await settle(engine, "the answer", task_id="waiting")
        assert resumed.status.state == pb.TASK_STATE_COMPLETED
    finally:
        await engine.shutdown()


# ------------------------------------------------------------------------------ shutdown


async def test_shutdown_fails_working_turns_and_keeps_interrupted_ones():
    store = MemoryTaskStore()
    engine = Engine(store, ScriptedAgent(), InProcessBus())
    working_turn = await start(engine, "hang")
    working = working_turn.run.task_id
    await until_stored(engine, working, pb.TASK_STATE_WORKING)
    paused = await settle(engine, "ask what is it?")  # its agent is alive, waiting for input
    ended = await settle(engine, "input more please")  # its agent has returned
    paused_seq = await store.last_seq(SCOPE, paused.id)
    outcome = asyncio.ensure_future(engine.wait(working_turn))

    assert await asyncio.wait_for(engine.shutdown(), WAIT) == 1

    failed = await store.get(SCOPE, working)
    assert failed.status.state == pb.TASK_STATE_FAILED
    assert status_text(failed) == SHUTDOWN_MESSAGE
    assert (await asyncio.wait_for(outcome, WAIT)).status.state == pb.TASK_STATE_FAILED
    for task in (paused, ended):
        kept = await store.get(SCOPE, task.id)
        assert kept.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert kept.status == task.status  # the question still stands
    assert await store.last_seq(SCOPE, paused.id) == paused_seq
    # After a restart: nothing to recover, and a follow-up starts a new turn.
    again = Engine(store, ScriptedAgent(), InProcessBus())
    try:
        assert await again.recover() == 0
        resumed = await settle(again, "the answer", task_id=paused.id)
        assert resumed.status.state == pb.TASK_STATE_COMPLETED
        assert [p.text for p in resumed.artifacts[-1].parts] == ["follow-up: the answer"]
    finally:
        await again.shutdown()


async def test_shutdown_right_after_start_fails_the_turn():
    agent = Watched()
    engine = Engine(MemoryTaskStore(), agent, InProcessBus())
    turn = await engine.send(SCOPE, user_message("work"), CALLER, return_immediately=True)
    assert await engine.shutdown() == 1  # at once: the agent may not have taken a step
    task = await stored(engine, turn.run.task_id)
    assert task.status.state == pb.TASK_STATE_FAILED
    assert status_text(task) == SHUTDOWN_MESSAGE
    assert agent.canceled == agent.started


class SteadyRecordingStore(MemoryTaskStore):
    """Records, per save, the kinds of its events and whether it came as `steady`."""

    def __init__(self) -> None:
        super().__init__()
        self.saves: list[tuple[list[str | None], bool]] = []

    async def save(self, scope, task, events, configs=(), snapshot=None, steady=False) -> None:
        await super().save(scope, task, events, configs, snapshot, steady)
        self.saves.append(([e.event.WhichOneof("payload") for e in events], steady))


async def test_a_run_says_steady_only_for_chunks_with_nothing_else_changed():
    """Steady saves let a store keep its snapshot (SQLite does, between multiples): only a
    commit of artifact updates alone qualifies, and not the one after a change no event
    tells of (service metadata), which the stored snapshot must then carry."""
    store = SteadyRecordingStore()
    run = TaskRun(store=store, bus=InProcessBus(), scope=SCOPE, task_id="t", context_id="c")
    chunk = pb.Artifact(artifact_id="a")
    chunk.parts.add(text="x")
    run.artifact(chunk, append=False, last_chunk=False, metadata=None)  # creates, WORKING
    await run.flushed()
    run.artifact(chunk, append=True, last_chunk=False, metadata=None)
    await run.flushed()
    run.set_service_metadata({"note": "kept"})
    run.artifact(chunk, append=True, last_chunk=False, metadata=None)
    await run.flushed()
    run.artifact(chunk, append=True, last_chunk=True, metadata=None)
    await run.flushed()
    assert store.saves == [
        (["task", "status_update", "artifact_update"], False),
        (["artifact_update"], True),
        (["artifact_update"], False),  # carries the metadata change
        (["artifact_update"], True),
    ]
    stored = await store.get(SCOPE, "t")
    assert stored.metadata["a2a_service"]["note"] == "kept"
    assert list(stored.artifacts[0].parts) == [chunk.parts[0]] * 4
