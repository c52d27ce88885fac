"""One contract for every push queue: local-file and redis-streams (against the real Redis).

Enqueue, lease (one head per lane, in sequence order), ack, retry, release,
dead-letter and replay, cursors with compare-and-set, and crash-and-recover.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from service.push.queue_base import CursorMove, Job, PushQueue
from service.push.queue_file import FileQueue
from service.push.queue_redis import RedisQueue
from tests.push_util import delete_prefix, redis_or_skip, unique_prefix

TASK_A = ("t1", "alice", "task-a")
TASK_B = ("t1", "alice", "task-b")


def jobs(task: tuple[str, str, str], config: str, seqs, now: float | None = None) -> list[Job]:
    now = time.time() if now is None else now
    return [Job.new((*task, config), seq, f'{{"seq":{seq}}}', now) for seq in seqs]


class Backend:
    """Makes queues of one kind over the same storage, and crashes them."""

    def __init__(self, kind: str, tmp_path, url: str = "", prefix: str = "") -> None:
        self.kind, self.tmp_path, self.url, self.prefix = kind, tmp_path, url, prefix
        self.made: list[PushQueue] = []
        self.workers = 0

    async def make(self, lease_seconds: float = 30.0, same_worker: bool = True) -> PushQueue:
        if self.kind == "local-file":
            queue: PushQueue = FileQueue(self.tmp_path / "push-queue", lease_seconds=lease_seconds)
        else:
            if not same_worker:
                self.workers += 1
            queue = RedisQueue(
                self.url,
                prefix=self.prefix,
                consumer=f"worker-{self.workers}",
                lease_seconds=lease_seconds,
            )
        await queue.open()
        self.made.append(queue)
        return queue

    async def crash(self, queue: PushQueue) -> None:
        """Gone without a goodbye: nothing handed back, nothing acknowledged."""
        self.made.remove(queue)
        if isinstance(queue, FileQueue):
            queue.abandon()
        else:
            assert isinstance(queue, RedisQueue) and queue.redis is not None
            await queue.redis.aclose()
            queue.redis = None


@pytest.fixture(params=["local-file", "redis-streams"])
async def backend(request, tmp_path):
    if request.param == "redis-streams":
        url = await redis_or_skip()
        b = Backend("redis-streams", tmp_path, url, unique_prefix())
    else:
        b = Backend("local-file", tmp_path)
    yield b
    for queue in b.made:
        await queue.close()
    if b.kind == "redis-streams":
        await delete_prefix(b.prefix)


async def lease_all(queue: PushQueue, limit: int = 100, wait: float = 0.0) -> list:
    deadline = time.monotonic() + wait
    while True:
        got = await queue.lease(limit)
        if got or time.monotonic() >= deadline:
            return got
        await asyncio.sleep(0.02)


async def drain(queue: PushQueue) -> list[Job]:
    """Lease and ack until nothing is left; the jobs in the order they were handed out."""
    out: list[Job] = []
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 0.3:
        leases = await queue.lease(100)
        if leases:
            idle_since = time.monotonic()
        for lease in leases:
            out.append(lease.job)
            await queue.ack(lease)
        if not leases:
            await asyncio.sleep(0.02)
    return out


async def test_enqueue_lease_ack_in_sequence_order(backend):
    q = await backend.make()
    assert await q.enqueue(jobs(TASK_A, "c1", range(1, 6)))
    [first] = await q.lease(10)  # one head per lane
    assert first.job.seq == 1 and first.job.task_id == "task-a" and first.job.body == '{"seq":1}'
    assert await q.lease(10) == []  # seq 2 waits for seq 1
    await q.ack(first)
    rest = await drain(q)
    assert [j.seq for j in rest] == [2, 3, 4, 5]


async def test_lanes_are_independent(backend):
    q = await backend.make()
    await q.enqueue(jobs(TASK_A, "c1", [1, 2]))
    await q.enqueue(jobs(TASK_A, "c2", [1, 2]))
    await q.enqueue(jobs(TASK_B, "c1", [7]))
    leases = await q.lease(10)
    assert sorted((lease.job.task_id, lease.job.config_id, lease.job.seq) for lease in leases) == [
        ("task-a", "c1", 1),
        ("task-a", "c2", 1),
        ("task-b", "c1", 7),
    ]
    slow = next(
        lease for lease in leases if lease.job.config_id == "c1" and lease.job.task_id == "task-a"
    )
    for lease in leases:
        if lease is not slow:
            await q.ack(lease)
    # task-a/c2 moves on although task-a/c1 is still in flight
    [nxt] = await lease_all(q, wait=2)
    assert (nxt.job.config_id, nxt.job.seq) == ("c2", 2)
    await q.ack(nxt)
    await q.ack(slow)
    assert [(j.config_id, j.seq) for j in await drain(q)] == [("c1", 2)]


async def test_retry_holds_the_lane_until_due(backend):
    q = await backend.make()
    await q.enqueue(jobs(TASK_A, "c1", [1, 2]))
    [lease] = await q.lease(10)
    job = lease.job
    job.attempts, job.last_error, job.due_at = 1, "HTTP 503", time.time() + 0.5
    await q.retry(lease, job)
    assert await q.lease(10) == []  # neither the retried job nor its successor
    [again] = await lease_all(q, wait=3)
    assert again.job.seq == 1 and again.job.attempts == 1 and again.job.last_error == "HTTP 503"
    assert time.time() >= job.due_at - 0.05
    await q.ack(again)
    assert [j.seq for j in await drain(q)] == [2]


async def test_release_counts_no_attempt(backend):
    q = await backend.make()
    await q.enqueue(jobs(TASK_A, "c1", [1]))
    [lease] = await q.lease(10)
    await q.release(lease, time.time() + 0.2)
    [again] = await lease_all(q, wait=3)
    assert again.job.seq == 1 and again.job.attempts == 0
    await q.ack(again)


async def test_dead_letter_list_and_replay(backend):
    q = await backend.make()
    await q.enqueue(jobs(TASK_A, "c1", [1, 2, 3]))
    [lease] = await q.lease(10)
    job = lease.job
    job.attempts = 4
    await q.dead(lease, job, "HTTP 404")
    [nxt] = await lease_all(q, wait=2)  # the lane moves on past a dead job
    assert nxt.job.seq == 2
    await q.dead(nxt, nxt.job, "HTTP 410")
    dead = await q.list_dead()
    assert [(d.job.seq, d.error, d.job.attempts) for d in dead] == [
        (1, "HTTP 404", 4),
        (2, "HTTP 410", 0),
    ]
    assert all(d.failed_at > 0 for d in dead)
    assert await q.replay_dead([dead[0].id]) == 1
    assert [d.job.seq for d in await q.list_dead()] == [2]
    delivered = await drain(q)
    assert sorted(j.seq for j in delivered) == [1, 3]
    replayed = next(j for j in delivered if j.seq == 1)
    assert replayed.replay and replayed.attempts == 0 and replayed.last_error == ""
    assert await q.replay_dead(None) == 1
    assert await q.list_dead() == []
    assert [j.seq for j in await drain(q)] == [2]
    assert await q.replay_dead(["no-such-id"]) == 0


async def test_cursors_move_with_compare_and_set(backend):
    q = await backend.make()
    key = (*TASK_A, "c1")
    assert await q.cursors(TASK_A) == {}
    await q.start_cursor(key, 3)
    await q.start_cursor(key, 99)  # exists: unchanged
    assert await q.cursors(TASK_A) == {"c1": 3}
    assert TASK_A in await q.cursor_tasks()
    assert not await q.enqueue(jobs(TASK_A, "c1", [5]), CursorMove(key, 4, 5))  # stale expectation
    assert await q.lease(10) == []  # nothing was added
    assert await q.enqueue(jobs(TASK_A, "c1", [4, 5]), CursorMove(key, 3, 5))
    assert await q.cursors(TASK_A) == {"c1": 5}
    assert not await q.enqueue(
        jobs(TASK_A, "c1", [4, 5]), CursorMove(key, 3, 5)
    )  # no double enqueue
    assert [j.seq for j in await drain(q)] == [4, 5]
    await q.drop_cursor(key)
    assert await q.cursors(TASK_A) == {} and TASK_A not in await q.cursor_tasks()
    assert not await q.enqueue(jobs(TASK_A, "c1", [6]), CursorMove(key, 5, 6))  # dropped: refused


async def test_crash_and_restart_hands_out_every_unacknowledged_job(backend):
    q = await backend.make()
    key = (*TASK_A, "c1")
    await q.start_cursor(key, 0)
    await q.enqueue(jobs(TASK_A, "c1", [1, 2, 3]), CursorMove(key, 0, 3))
    await q.enqueue(jobs(TASK_B, "c1", [1]))
    leases = await q.lease(10)
    assert len(leases) == 2
    await backend.crash(q)  # two jobs in flight, two waiting

    restarted = await backend.make()  # the same worker identity comes back
    assert await restarted.cursors(TASK_A) == {"c1": 3}
    delivered = await drain(restarted)
    assert sorted((j.task_id, j.seq) for j in delivered) == [
        ("task-a", 1),
        ("task-a", 2),
        ("task-a", 3),
        ("task-b", 1),
    ]
    assert [j.seq for j in delivered if j.task_id == "task-a"] == [1, 2, 3]  # still in order


async def test_another_worker_takes_over_after_the_lease_expires(backend):
    q = await backend.make(lease_seconds=0.3)
    await q.enqueue(jobs(TASK_A, "c1", [1, 2]))
    [lease] = await q.lease(10)
    if backend.kind == "local-file":
        other = q  # one process owns the directory; a hung delivery is what expires there
    else:
        other = await backend.make(lease_seconds=0.3, same_worker=False)
    assert await other.lease(10) == []  # still leased
    await asyncio.sleep(0.4)
    [taken] = await lease_all(other, wait=2)
    assert taken.job.seq == 1
    await q.ack(lease)  # the first worker finishes late: harmless
    await other.ack(taken)
    assert [j.seq for j in await drain(other)] == [2]  # seq 2 exactly once


async def test_jobs_survive_reopen_after_clean_close(backend):
    q = await backend.make()
    await q.enqueue(jobs(TASK_A, "c1", [1, 2]))
    [lease] = await q.lease(10)
    assert lease.job.seq == 1
    backend.made.remove(q)
    await q.close()  # stops mid-delivery
    again = await backend.make()
    assert [j.seq for j in await drain(again)] == [1, 2]


async def test_local_file_a_lost_cursor_move_falls_back_to_its_durable_start(tmp_path):
    """Cursor moves are not fsync'ed; losing one (power failure) may repeat jobs, never skip any."""
    q = FileQueue(tmp_path / "push-queue")
    await q.open()
    key = (*TASK_A, "c1")
    await q.start_cursor(key, 2)
    assert await q.enqueue(jobs(TASK_A, "c1", [3, 4]), CursorMove(key, 2, 4))
    q.abandon()
    for moved in (tmp_path / "push-queue" / "cursors").glob("*.seq"):
        moved.write_text("")  # the move did not reach the disk
    again = FileQueue(tmp_path / "push-queue")
    await again.open()
    try:
        assert await again.cursors(TASK_A) == {"c1": 2}
        assert [j.seq for j in await drain(again)] == [3, 4]  # the jobs themselves were durable
    finally:
        await again.close()


async def test_redis_a_job_whose_ack_redis_never_answered_is_handed_out_again(tmp_path):
    """Redis went away while a delivery was being acknowledged: the job stays pending and
    comes back once its lease expires, also to the consumer whose ack failed (it must not
    skip it, or its own claims would keep it from ever going idle for another)."""
    from service.protocol.errors import UnavailableError
    from tests.redis_util import OwnRedis

    own = OwnRedis(str(tmp_path / "redis"), persistent=True).start()
    queue = RedisQueue(own.url, prefix=unique_prefix(), consumer="only", lease_seconds=0.3)
    try:
        await queue.open()
        await queue.enqueue(jobs(TASK_A, "c1", [1, 2]))
        [lease] = await queue.lease(10)
        own.stop()
        with pytest.raises(UnavailableError):
            await queue.ack(lease)
        own.start()
        [again] = await lease_all(queue, wait=5)
        assert again.job.seq == 1
        await queue.ack(again)
        assert [j.seq for j in await drain(queue)] == [2]
    finally:
        await queue.close()
        own.stop()
