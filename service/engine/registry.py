"""The task engine: protocol rules for messages, tasks, cancellation and streams.

Transport-free: takes and returns generated messages, raises A2AError. One
TaskRun per live task is the only writer of that task in this process.

`Engine` is the facade the API and the composition root see; the work is done by
its parts, one concept each: the table of live runs (`runs.py`), commands
(`commands.py`: send, follow-up, cancel), turn driving (`driver.py`), the
subscribe/follow family (`subscriptions.py`), reads (`reads.py`) and startup
recovery (`recovery.py`). The other processes of a cluster are an `Elsewhere`
(`elsewhere.py`), given at construction; one process is `Here`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence

from gen import a2a_pb2 as pb
from service.agent import Agent, Caller
from service.engine.bus import EventBus, Subscription
from service.engine.commands import Commands
from service.engine.driver import SHUTDOWN_MESSAGE, Driver
from service.engine.elsewhere import Elsewhere, Here
from service.engine.files import FileArtifacts, StoredFile
from service.engine.limits import Slots
from service.engine.reads import Reads
from service.engine.recovery import RESTART_MESSAGE, Recovery
from service.engine.run import TaskRun
from service.engine.runs import Runs
from service.engine.subscriptions import Subscriptions
from service.engine.turn import Turn
from service.permission.policy import ASK, PermissionPolicy
from service.protocol.states import SETTLED
from service.protocol.views import encode_cursor  # the token format, for tools
from service.store import Scope, StoredEvent, TaskStore

__all__ = ["RESTART_MESSAGE", "SHUTDOWN_MESSAGE", "Engine", "Turn", "encode_cursor"]


class Engine:
    def __init__(
        self,
        store: TaskStore,
        agent: Agent,
        bus: EventBus,
        on_commit: Callable[[Scope, str, list[StoredEvent]], None] | None = None,
        event_pace: float = 0.0,
        files: FileArtifacts | None = None,
        permissions: PermissionPolicy = ASK,
        turns: Slots | None = None,
        inactivity_timeout: float = 0.0,
        max_turn_seconds: float = 0.0,
        peers: Elsewhere | None = None,
        first_event_grace: float | None = None,
        park_after: float = 0.0,
    ) -> None:
        self.store = store
        self.files = files  # stored file artifacts (None: ctx.file_artifact is refused)
        self.agent = agent
        self.bus = bus  # chosen by the composition root (in-process for one replica)
        self.permissions = permissions  # who decides ctx.request_permission (permission_mode)
        # on_commit: called synchronously after each committed batch of events; event_pace:
        # see TaskRun, seconds of a running agent's events per commit.
        # park_after: seconds a turn may wait in ctx.ask() before it is parked (0: never).
        self.runs = Runs(store, bus, on_commit, event_pace, files, turns, park_after)
        self.turns = self.runs.turns  # turn slots (None: no limit)
        # Several processes on one store and bus (service.engine.peers), or just this one.
        self.elsewhere: Elsewhere = peers if peers is not None else Here(self)
        self.driver = Driver(agent, self.runs, self.elsewhere, inactivity_timeout, max_turn_seconds)
        self.watchdog = self.driver.watchdog
        # Agent coroutines that ignored their cancellation after a stall: still running,
        # no longer waited for (the process exits without them).
        self.abandoned = self.driver.abandoned
        self.subscriptions = Subscriptions(store, bus, self.runs)
        self.reads = Reads(store, files, self.runs)
        self.commands = Commands(
            self.runs,
            self.driver,
            self.subscriptions,
            self.reads,
            self.elsewhere,
            permissions,
            first_event_grace,
        )
        self.recovery = Recovery(self.runs, self.elsewhere)

    # ---- startup -----------------------------------------------------------

    async def recover(self) -> int:
        """Tasks that were running when the process died are FAILED with a clear message.
        (Several processes: only those whose process is gone, see Peers.sweep.)"""
        return await self.recovery.recover()

    async def recover_task(self, scope: Scope, task: pb.Task) -> None:
        """Move one task nobody runs any more to FAILED (the restart message)."""
        await self.recovery.recover_task(scope, task)

    def live_keys(self) -> list[str]:
        """Bus keys of the tasks whose agent coroutine runs here (working or paused) and
        whose owner is recorded (see TaskRun.claim)."""
        return self.runs.live_keys()

    # ---- SendMessage / SendStreamingMessage / CancelTask -----------------------

    def send(
        self,
        scope: Scope,
        message: pb.Message,
        caller: Caller,
        *,
        return_immediately: bool = False,
        stream: bool = False,
        before_start: Callable[[str], Awaitable[Sequence[pb.TaskPushNotificationConfig]]]
        | None = None,
    ) -> Awaitable[Turn]:
        """Start a new task's turn or resume an interrupted task (see Commands.send).

        Hands back the commands' own coroutine: every send would otherwise pay for one
        more coroutine frame that only forwards (as `wait` below)."""
        return self.commands.send(
            scope,
            message,
            caller,
            return_immediately=return_immediately,
            stream=stream,
            before_start=before_start,
        )

    def wait(self, turn: Turn) -> Awaitable[pb.Message | pb.Task]:
        """Outcome of a blocking send: the direct reply or the settled task."""
        return self.commands.wait(turn)

    async def accepted(self, run: TaskRun) -> pb.Task:
        """For returnImmediately: the task as soon as its creation (event 1) is committed."""
        return await self.commands.accepted(run)

    async def answer_now(self, turn: Turn) -> pb.Message | pb.Task:
        """For returnImmediately: the task once its creation is committed, or the agent's
        direct reply within the first-event grace (see Commands.answer_now)."""
        return await self.commands.answer_now(turn)

    async def cancel(self, scope: Scope, task_id: str) -> pb.Task:
        return await self.commands.cancel(scope, task_id)

    # ---- SubscribeToTask and the streams of turns ---------------------------------

    async def subscribe(
        self, scope: Scope, task_id: str, after_seq: int | None = None
    ) -> AsyncIterator[pb.StreamResponse]:
        """SubscribeToTask (see Subscriptions.subscribe)."""
        return await self.subscriptions.subscribe(scope, task_id, after_seq)

    def subscribe_run(
        self,
        run: TaskRun,
        after_seq: int | None = None,
        *,
        until: frozenset[int] = SETTLED,
    ) -> AsyncIterator[pb.StreamResponse]:
        """Live events of a task, ending after a state in `until`."""
        return self.subscriptions.subscribe_run(run, after_seq, until=until)

    def follow_remote(
        self,
        scope: Scope,
        task_id: str,
        sub: Subscription,
        after_seq: int | None,
        *,
        until: frozenset[int] = SETTLED,
    ) -> AsyncGenerator[StoredEvent, None]:
        """Events of a task another process runs, snapshot first."""
        return self.subscriptions.follow_remote(scope, task_id, sub, after_seq, until=until)

    def live_events(
        self, scope: Scope, task_id: str, sub: Subscription, seen: int
    ) -> AsyncGenerator[StoredEvent, None]:
        """Events of the task after `seen` (stored ones first), until a settling one."""
        return self.subscriptions.live_events(scope, task_id, sub, seen)

    # ---- GetTask / ListTasks and stored files ------------------------------------

    async def get(self, scope: Scope, task_id: str) -> pb.Task:
        return await self.reads.get(scope, task_id)

    async def stored_file(self, scope: Scope, task_id: str, sha256: str) -> StoredFile:
        """A file artifact of a task the scope can see (see Reads.stored_file)."""
        return await self.reads.stored_file(scope, task_id, sha256)

    async def release_files(self, scope: Scope, task_id: str) -> int:
        """For task retention: a deleted task's stored files (see Reads.release_files)."""
        return await self.reads.release_files(scope, task_id)

    async def last_seq(self, scope: Scope, task_id: str) -> int:
        """The task's latest committed event (0 when none): where a new listener starts."""
        return await self.reads.last_seq(scope, task_id)

    async def latest_in_context(self, scope: Scope, context_id: str) -> pb.Task | None:
        """The context's task with the latest status (committed), or None."""
        return await self.reads.latest_in_context(scope, context_id)

    async def list(self, scope: Scope, request: pb.ListTasksRequest) -> pb.ListTasksResponse:
        return await self.reads.list(scope, request)

    def active_contexts(self) -> set[str]:
        """Contexts with a task live in this process (their bookkeeping is in use)."""
        return self.runs.active_contexts()

    # ---- shutdown ------------------------------------------------------------

    def busy(self) -> bool:
        """Whether any turn is still at work. What a drain waits for."""
        return self.runs.busy()

    def end_streams(self, error: BaseException) -> int:
        """End every open event stream with `error` (their tasks go on); returns how many."""
        return self.bus.end_all(error)

    async def shutdown(self) -> int:
        """Stop every agent coroutine and settle their tasks (see Driver.shutdown)."""
        return await self.driver.shutdown()
