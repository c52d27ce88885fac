"""The subscribe/follow family: the event streams of a task, for SendStreamingMessage
(one turn) and SubscribeToTask (until terminal), whether the task runs here or on
another process (shared bus). Every stream takes its snapshot (and resume point) and its
bus subscription together, so no event falls between, and fills gaps from the store.

SubscribeToTask always starts with the task's current snapshot, numbered with the last
event it includes (spec 1.0.1 §3.1.6: a Task first). A resumed one (`after_seq`, from
`Last-Event-ID`) then replays every event after `after_seq` — also those the snapshot
already includes, which therefore carry numbers up to the snapshot's — and goes on with
live ones: each event once, no gap.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

from gen import a2a_pb2 as pb
from service.engine.bus import RESYNC, EventBus, Subscription
from service.engine.run import TaskRun, task_key
from service.engine.runs import Runs
from service.engine.stream import EventStream
from service.protocol.errors import TaskNotFoundError, UnsupportedOperationError, invalid_field
from service.protocol.states import SETTLED, TERMINAL, ends_stream, state_name
from service.store import Scope, StoredEvent, TaskStore, snapshot_with_seq


class Subscriptions:
    def __init__(self, store: TaskStore, bus: EventBus, runs: Runs) -> None:
        self.store = store
        self.bus = bus
        self.runs = runs

    async def subscribe(
        self, scope: Scope, task_id: str, after_seq: int | None = None
    ) -> AsyncIterator[pb.StreamResponse]:
        """SubscribeToTask: the task's current snapshot, then its events until it is
        terminal, across pauses and the turns follow-ups start. With `after_seq` (a resumed
        stream), the events after it follow the snapshot: stored ones first, then live."""
        run = self.runs.get(scope, task_id)
        if run is None:
            if getattr(self.bus, "shared", False):
                found = await self.store.get(scope, task_id)
                if found is None:
                    raise TaskNotFoundError(f"Task {task_id} not found.")
                if found.status.state not in SETTLED:
                    # Another process runs it: its events reach us through the shared bus.
                    return await self._subscribe_remote(scope, task_id, after_seq)
            # Nobody runs it here (e.g. paused between turns): load it, so the snapshot and
            # the subscription are taken together; the subscription is to the task's topic,
            # which the run a follow-up creates publishes to, so the run can go again.
            run = await self.runs.load(scope, task_id)
            try:
                return self._subscribe_task(run, after_seq)
            finally:
                self.runs.release(run)
        if run.ready is not None:
            await asyncio.shield(run.ready)
        if run.task is None:  # a direct-reply turn: there is no task
            raise TaskNotFoundError(f"Task {task_id} not found.")
        return self._subscribe_task(run, after_seq)

    def _subscribe_task(
        self, run: TaskRun, after_seq: int | None
    ) -> AsyncIterator[pb.StreamResponse]:
        """The protocol's checks for SubscribeToTask, then the live subscription."""
        assert run.task is not None
        state = run.task.status.state
        if state in TERMINAL and after_seq is None:
            raise UnsupportedOperationError(
                f"Task {run.task_id} is {state_name(state)}; there is nothing to subscribe to."
            )
        if after_seq is not None and after_seq > run.seq:
            raise invalid_field(
                "Last-Event-ID",
                f"is past the task's latest event ({run.seq}); resume from an id you received",
            )
        return self.subscribe_run(run, after_seq, until=TERMINAL)

    async def _subscribe_remote(
        self, scope: Scope, task_id: str, after_seq: int | None
    ) -> AsyncIterator[pb.StreamResponse]:
        """SubscribeToTask of a task another process runs (shared bus): until terminal."""
        if after_seq is not None:
            latest = await self.store.last_seq(scope, task_id)
            if after_seq > latest:
                raise invalid_field(
                    "Last-Event-ID",
                    f"is past the task's latest event ({latest}); resume from an id you received",
                )
        sub = self.bus.subscribe(task_key(scope, task_id))
        return EventStream(
            self.follow_remote(scope, task_id, sub, after_seq, until=TERMINAL, snapshot=True)
        )

    def follow_remote(
        self,
        scope: Scope,
        task_id: str,
        sub: Subscription,
        after_seq: int | None,
        *,
        until: frozenset[int] = SETTLED,
        snapshot: bool = False,
    ) -> AsyncGenerator[StoredEvent, None]:
        """Events of a task another process runs: the committed snapshot (without
        `after_seq`, or with `snapshot`), then the events after `after_seq` (stored ones
        first) or after the snapshot, live ones from the bus, gaps filled from the store,
        until one puts the task in a state of `until`. Subscribed before the store is read:
        nothing falls between."""
        return self._events(
            scope,
            task_id,
            sub,
            after_seq,
            until=until,
            catch_up=True,
            stored_snapshot=after_seq is None or snapshot,
        )

    def live_events(
        self, scope: Scope, task_id: str, sub: Subscription, seen: int
    ) -> AsyncGenerator[StoredEvent, None]:
        """Events of the task after `seen` (stored ones first), until a settling one. The
        caller closes `sub`."""
        return self._events(scope, task_id, sub, seen, catch_up=True, close=False)

    async def _events(
        self,
        scope: Scope,
        task_id: str,
        sub: Subscription,
        seen: int | None,
        *,
        until: frozenset[int] = SETTLED,
        catch_up: bool,
        stored_snapshot: bool = False,
        first: StoredEvent | None = None,
        replay_after: int | None = None,
        over: int | None = None,
        run: TaskRun | None = None,
        close: bool = True,
    ) -> AsyncGenerator[StoredEvent, None]:
        """Every stream of a task is this one generator, the bus read in its own loop (no
        layer that only passes events on): a snapshot (`first`, or with `stored_snapshot`
        the committed one, read now; `seen` None: live events follow it), then stored
        events after `replay_after`, then bus events after `seen`, each once, until one
        puts the task in a state of `until` (or is a direct reply), or `seen` reaches
        `over` (the seq at which the task was already in such a state). A snapshot in such
        a state ends the stream unless events it includes are still to be replayed (`seen`
        below its number). A RESYNC from the bus or a jump in the sequence reads what was
        missed from the store (`catch_up`: once before the first live event too). With
        `run`, a topic that closes after the turn failed raises its error. `close`: the
        subscription is closed at the end."""
        try:
            if stored_snapshot:
                found = await snapshot_with_seq(self.store, scope, task_id)
                if found is None:
                    raise TaskNotFoundError(f"Task {task_id} not found.")
                task, at = found
                first = StoredEvent(at, pb.StreamResponse(task=task))
            if first is not None:
                if seen is None:
                    seen = first.seq
                yield first
                if ends_stream(first.event, until) and seen >= first.seq:
                    return
            assert seen is not None
            if replay_after is not None:
                for stored in await self.store.events_after(scope, task_id, replay_after):
                    if stored.seq > seen:
                        seen = stored.seq
                        yield stored
                        if ends_stream(stored.event, until):
                            return
            if over is not None and seen >= over:
                return
            resync = catch_up
            while True:
                if resync:
                    stored, resync = RESYNC, False
                else:
                    item = await sub.next()
                    if item is None:
                        break
                    stored = item
                if stored.seq < 0 or stored.seq > seen + 1:
                    for missed in await self.store.events_after(scope, task_id, seen):
                        seen = missed.seq
                        yield missed
                        if ends_stream(missed.event, until):
                            return
                    if stored.seq < 0:
                        continue
                if stored.seq and stored.seq <= seen:
                    continue  # already covered by the snapshot, the replay or a catch-up
                seen = max(seen, stored.seq)
                yield stored
                if ends_stream(stored.event, until):
                    return
            if run is not None:
                turn = run.turn
                if turn is not None and turn.done() and not turn.cancelled():
                    failure = turn.exception()
                    if failure is not None:
                        raise failure
        finally:
            if close:
                sub.close()

    def subscribe_run(
        self,
        run: TaskRun,
        after_seq: int | None = None,
        *,
        until: frozenset[int] = SETTLED,
    ) -> AsyncIterator[pb.StreamResponse]:
        """Live events of a task, ending after a state in `until`: SETTLED for one turn's
        stream (SendStreamingMessage), TERMINAL for SubscribeToTask. Snapshot (or resume
        point) and subscription are taken together, synchronously, so no event falls
        between them."""
        assert run.task is not None
        sub = self.bus.subscribe(run.key)
        # A terminal task whose last event the resume point already covers has nothing left.
        over = run.seq if run.state in until else None
        snapshot = pb.StreamResponse()
        snapshot.task.CopyFrom(run.task)
        first = StoredEvent(run.seq, snapshot)  # numbered with the last event it includes
        if after_seq is not None:
            return EventStream(self.follow(run, sub, first, after_seq, after_seq, until, over))
        return EventStream(self.follow(run, sub, first, run.seq, None, until, over))

    def follow(
        self,
        run: TaskRun,
        sub: Subscription,
        first: StoredEvent | None,
        seen: int,
        replay_after: int | None,
        until: frozenset[int] = SETTLED,
        over: int | None = None,
    ) -> AsyncGenerator[StoredEvent, None]:
        """Yield `first` (a snapshot), then stored events after `replay_after`, then live
        events after `seen`, until one puts the task in a state of `until` (or is a direct
        reply), or `seen` reaches `over` (the seq at which the task was already in such a
        state). A snapshot in such a state ends the stream unless events it includes are
        still to be replayed (`seen` below its number)."""
        return self._events(
            run.scope,
            run.task_id,
            sub,
            seen,
            until=until,
            catch_up=False,
            first=first,
            replay_after=replay_after,
            over=over,
            run=run,
        )
