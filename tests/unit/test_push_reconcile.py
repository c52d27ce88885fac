"""The dispatcher's look over every cursor (`Dispatcher.reconcile`), on the memory store and
a real local-file queue: a cursor whose task is still being created (by this process or,
with a shared queue, by another) is kept, one whose task never appears is dropped once it
has waited `orphan_seconds`, and events another process committed but never enqueued are
caught up."""

from __future__ import annotations

from gen import a2a_pb2 as pb
from service.push.dispatcher import Dispatcher
from service.push.queue_file import FileQueue
from service.store import Scope, StoredEvent
from service.store.memory import MemoryTaskStore

SCOPE = Scope("acme", "alice")
KEY = (SCOPE.tenant, SCOPE.owner, "t1")
CURSOR = (*KEY, "cfg")


def status(task_id: str, seq: int, state: int) -> StoredEvent:
    event = pb.StreamResponse()
    event.status_update.task_id = task_id
    event.status_update.status.state = state
    return StoredEvent(seq, event)


async def opened(tmp_path) -> FileQueue:
    queue = FileQueue(tmp_path / "queue")
    await queue.open()
    return queue


async def test_a_cursor_of_a_task_being_created_is_kept_and_then_delivered(tmp_path):
    store, queue = MemoryTaskStore(), await opened(tmp_path)
    try:
        await queue.start_cursor(CURSOR, 0)  # made before the agent runs; no task yet
        dispatcher = Dispatcher(store, queue, orphan_seconds=3600)
        await dispatcher.start()  # e.g. another worker restarting meanwhile
        assert await queue.cursors(KEY) == {"cfg": 0}
        # The task's first commit stores its config with its events; the engine pokes.
        task = pb.Task(id="t1", context_id="c")
        task.status.state = pb.TASK_STATE_COMPLETED
        events = [status("t1", 1, pb.TASK_STATE_WORKING), status("t1", 2, task.status.state)]
        config = pb.TaskPushNotificationConfig(task_id="t1", id="cfg", url="https://x/hook")
        await store.save(SCOPE, task, events, configs=[config])
        dispatcher.on_commit(SCOPE, "t1", events)
        await dispatcher.idle()
        leased = await queue.lease(10)
        assert [lease.job.seq for lease in leased] == [1]  # one lane: the head first
        assert await queue.cursors(KEY) == {}  # the terminal event is enqueued: dropped
        await dispatcher.stop()
    finally:
        await queue.close()


async def test_a_cursor_whose_task_is_never_stored_is_dropped_after_its_wait(tmp_path):
    store, queue = MemoryTaskStore(), await opened(tmp_path)
    try:
        await queue.start_cursor(CURSOR, 0)
        patient = Dispatcher(store, queue, orphan_seconds=3600)
        await patient.reconcile()
        assert await queue.cursors(KEY) == {"cfg": 0}
        done_waiting = Dispatcher(store, queue, orphan_seconds=0)
        await done_waiting.reconcile()
        assert await queue.cursors(KEY) == {}
        assert await queue.cursor_tasks() == []
    finally:
        await queue.close()


async def test_events_committed_by_a_process_that_stopped_are_caught_up(tmp_path):
    store, queue = MemoryTaskStore(), await opened(tmp_path)
    try:
        task = pb.Task(id="t1", context_id="c")
        task.status.state = pb.TASK_STATE_COMPLETED
        config = pb.TaskPushNotificationConfig(task_id="t1", id="cfg", url="https://x/hook")
        await queue.start_cursor(CURSOR, 0)
        events = [status("t1", n, pb.TASK_STATE_WORKING) for n in (1, 2)]
        events.append(status("t1", 3, pb.TASK_STATE_COMPLETED))
        await store.save(SCOPE, task, events, configs=[config])  # nobody enqueued them
        survivor = Dispatcher(store, queue, reconcile_seconds=0)
        await survivor.start()
        await survivor.idle()
        seqs = []
        while leased := await queue.lease(10):
            for lease in leased:
                seqs.append(lease.job.seq)
                await queue.ack(lease)
        assert seqs == [1, 2, 3]
        assert await queue.cursors(KEY) == {}
        await survivor.stop()
    finally:
        await queue.close()
