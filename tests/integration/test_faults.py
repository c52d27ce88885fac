"""Fault injection across processes: `serve --workers 2` on this machine's PostgreSQL and a
Redis server of the test's own (its append-only file on, so a restart keeps the push
queue), push notifications on the `redis-streams` queue to a receiver in this process, and
a steady load of sends with a push config over gRPC, JSON-RPC and REST. While it runs:
kill -9 of a worker (the parent starts it again), PostgreSQL's backends terminated, and
Redis killed and restarted. Then, for every task the store holds:

- its event log is contiguous (1..n, no number skipped or repeated) and its snapshot is at
  the last event; every task reached a terminal state;
- every event was delivered to the receiver at least once;
- no push config exists without its task, and no push cursor is left behind;
- and every answer a caller got was a result, RESOURCE_EXHAUSTED / UNAVAILABLE with a
  retry hint, or a broken connection (the worker it talked to was killed): never INTERNAL.

`make test` runs one short round of each fault; `make test-faults` (A2A_FAULTS_LONG=1) runs
the long variant: more rounds over a longer load.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import time
import uuid
from dataclasses import dataclass, field

import asyncpg
import grpc
import httpx
import pytest
import redis.asyncio as aioredis
from cryptography.fernet import Fernet
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from gen import a2a_pb2 as pb
from gen import a2a_pb2_grpc
from tests.conftest import user_message
from tests.pg_util import admin, create_database, drop_database
from tests.process import ServerProcess, children_of, free_port, is_ready_line
from tests.push_util import Receiver, eventually
from tests.redis_util import OwnRedis

LONG = os.environ.get("A2A_FAULTS_LONG", "") == "1"
ROUNDS = 3 if LONG else 1  # of each fault
LOAD_SECONDS = 45.0 if LONG else 14.0
CALLERS = 12  # concurrent senders (a third per binding)
MAX_TURN_SECONDS = 2.0  # bounds a new task's first turn: orphan cursors go 12 s after
V1 = {"A2A-Version": "1.0"}


@dataclass
class Outcomes:
    """What the callers were told, by kind."""

    counts: collections.Counter[str] = field(default_factory=collections.Counter)
    wrong: list[str] = field(default_factory=list)  # answers no caller may get
    acknowledged: set[str] = field(default_factory=set)  # task ids of successful sends

    def note(self, kind: str, problem: str = "") -> None:
        self.counts[kind] += 1
        if problem and len(self.wrong) < 20:
            self.wrong.append(problem)


@pytest.fixture
async def rig(tmp_path):
    """The cluster's parts; the servers are started by the test."""
    url, name = await create_database()
    own_redis = OwnRedis(str(tmp_path / "redis"), persistent=True).start()
    receiver = await Receiver().start()
    try:
        yield url, name, own_redis, receiver
    finally:
        await receiver.stop()
        own_redis.stop()
        await drop_database(name)


def server_env(store_url: str, redis_url: str) -> dict[str, str]:
    return {
        "A2A_STORE": store_url,
        "A2A_BUS": redis_url,
        "A2A_LEASE_SECONDS": "3",
        "A2A_PUSH_NOTIFICATIONS": "true",
        "A2A_PUSH_QUEUE": "redis-streams",
        "A2A_PUSH_REDIS_URL": redis_url,
        "A2A_PUSH_SECRET_KEYS": Fernet.generate_key().decode(),
        "A2A_PUSH_ALLOW_NETWORKS": "127.0.0.0/8",
        "A2A_PUSH_RETRY_BASE_SECONDS": "0.05",
        "A2A_PUSH_RETRY_MAX_SECONDS": "0.5",
        "A2A_PUSH_TIMEOUT_SECONDS": "2",
        "A2A_PUSH_LEASE_SECONDS": "4",
        "A2A_PUSH_RECONCILE_SECONDS": "1",
        "A2A_MAX_TURN_SECONDS": str(MAX_TURN_SECONDS),
        "A2A_LOG_LEVEL": "WARNING",
        "A2A_ACCESS_LOG": "false",
    }


def retry_hint_of_grpc(err: grpc.aio.AioRpcError) -> bool:
    status = rpc_status.from_call(err)
    if status is None:
        return False
    return any(d.Is(error_details_pb2.RetryInfo.DESCRIPTOR) for d in status.details)


async def caller(
    binding: str,
    grpc_address: str,
    http_base: str,
    receiver_url: str,
    until: float,
    outcomes: Outcomes,
) -> None:
    """Send with a push config until `until`, noting each answer; a fresh connection after
    each broken one (the kernel may then pick the other worker)."""
    channel = grpc.aio.insecure_channel(grpc_address)
    stub = a2a_pb2_grpc.A2AServiceStub(channel)
    http = httpx.AsyncClient(base_url=http_base, timeout=30)
    push = {"url": receiver_url, "token": "faults"}
    try:
        while time.monotonic() < until:
            text = "slow 3"
            if binding == "grpc":
                request = pb.SendMessageRequest(message=user_message(text))
                request.configuration.task_push_notification_config.url = receiver_url
                request.configuration.task_push_notification_config.token = "faults"
                try:
                    done = await stub.SendMessage(request, timeout=30)
                    outcomes.acknowledged.add(done.task.id)
                    outcomes.note("ok")
                except grpc.aio.AioRpcError as err:
                    code = err.code()
                    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED):
                        if rpc_status.from_call(err) is None:
                            outcomes.note("connection lost")  # a killed worker's connection
                        elif retry_hint_of_grpc(err):
                            outcomes.note(code.name)
                        else:
                            outcomes.note(code.name, f"grpc {code.name} without RetryInfo")
                    else:
                        outcomes.note(code.name, f"grpc {code.name}: {err.details()}")
                    await channel.close()
                    channel = grpc.aio.insecure_channel(grpc_address)
                    stub = a2a_pb2_grpc.A2AServiceStub(channel)
                    await asyncio.sleep(0.05)
                continue
            message = {
                "messageId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
            params = {"message": message, "configuration": {"taskPushNotificationConfig": push}}
            try:
                if binding == "jsonrpc":
                    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
                    r = await http.post("/", json=body, headers=V1)
                    doc = (
                        r.json()
                        if r.headers.get("content-type", "").startswith("application/json")
                        else {}
                    )
                    error = doc.get("error")
                    task_id = (doc.get("result") or {}).get("task", {}).get("id")
                else:
                    r = await http.post("/message:send", json=params, headers=V1)
                    doc = r.json() if r.status_code == 200 else {}
                    error = None if r.status_code == 200 else r.text
                    task_id = doc.get("task", {}).get("id")
            except (httpx.TransportError, ValueError):
                outcomes.note("connection lost")
                await http.aclose()
                http = httpx.AsyncClient(base_url=http_base, timeout=30)
                await asyncio.sleep(0.05)
                continue
            if r.status_code == 200 and not error and task_id:
                outcomes.acknowledged.add(task_id)
                outcomes.note("ok")
            elif r.status_code in (429, 503):
                if "retry-after" in r.headers:
                    outcomes.note(f"http {r.status_code}")
                else:
                    outcomes.note(
                        f"http {r.status_code}", f"{binding} {r.status_code} no Retry-After"
                    )
                await asyncio.sleep(0.05)
            else:
                outcomes.note(f"http {r.status_code}", f"{binding} {r.status_code}: {r.text[:300]}")
    finally:
        await channel.close()
        await http.aclose()


async def kill_a_worker(parent: ServerProcess) -> None:
    assert parent.proc is not None
    workers = children_of(parent.proc.pid)
    assert workers, "no worker to kill"
    os.kill(workers[0], signal.SIGKILL)


async def end_backends(database: str) -> int:
    conn = await admin()
    try:
        ended = await conn.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = $1 AND pid <> pg_backend_pid()",
            database,
        )
        return int(ended)
    finally:
        await conn.close()


async def restart_redis(own_redis: OwnRedis, down_seconds: float) -> None:
    assert own_redis.proc is not None
    own_redis.proc.send_signal(signal.SIGKILL)
    own_redis.proc.wait(10)
    own_redis.proc = None
    await asyncio.sleep(down_seconds)
    await asyncio.to_thread(own_redis.start)


async def store_view(
    store_url: str,
) -> tuple[dict[str, list[int]], dict[str, tuple[int, int]], int]:
    """(task id -> its event sequence numbers, task id -> (state, snapshot last_seq), configs
    without a task)."""
    conn = await asyncpg.connect(store_url)
    try:
        seqs: dict[str, list[int]] = collections.defaultdict(list)
        for row in await conn.fetch("SELECT task_id, seq FROM a2a_events ORDER BY task_id, seq"):
            seqs[row["task_id"]].append(row["seq"])
        tasks = {
            row["id"]: (row["state"], row["last_seq"])
            for row in await conn.fetch("SELECT id, state, last_seq FROM a2a_tasks")
        }
        orphans = await conn.fetchval(
            "SELECT count(*) FROM a2a_push_configs c WHERE NOT EXISTS (SELECT 1 FROM a2a_tasks t"
            " WHERE t.tenant = c.tenant AND t.owner = c.owner AND t.id = c.task_id)"
        )
        return dict(seqs), tasks, int(orphans)
    finally:
        await conn.close()


async def queue_state_of(redis_url: str) -> dict[str, object]:
    """What the push queue holds (for a failure's message)."""
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return {
            "pending": await client.xpending("a2a:push:stream", "a2a-push"),
            "stream": await client.xlen("a2a:push:stream"),
            "lane heads": await client.hlen("a2a:push:head"),
            "retries": await client.zcard("a2a:push:retry"),
            "cursors": await client.hlen("a2a:push:cursor-tasks"),
        }
    finally:
        await client.aclose()


TERMINAL = {pb.TASK_STATE_COMPLETED, pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED}


async def test_nothing_is_lost_across_kills_and_outages_of_every_part(rig):
    store_url, database, own_redis, receiver = rig
    grpc_port, http_port = free_port(), free_port()
    cluster = ServerProcess(
        "--workers",
        "2",
        "--grpc-port",
        str(grpc_port),
        "--http-port",
        str(http_port),
        "--agent",
        "tests.agents:ScriptedAgent",
        "--data-dir",
        str(own_redis.workdir) + "-data",
        env=server_env(store_url, own_redis.url),
    )
    cluster.grpc_port = grpc_port
    await asyncio.to_thread(cluster.start, 60)
    stopped = False
    try:

        async def both_ready() -> bool:
            return sum(is_ready_line(line) for line in cluster.output) >= 2

        await eventually(both_ready, 60, "both workers ready")
        outcomes = Outcomes()
        started = time.monotonic()
        until = started + LOAD_SECONDS
        bindings = ["grpc", "jsonrpc", "rest"]
        load = [
            asyncio.create_task(
                caller(
                    bindings[i % 3],
                    f"127.0.0.1:{grpc_port}",
                    f"http://127.0.0.1:{http_port}",
                    receiver.url,
                    until,
                    outcomes,
                )
            )
            for i in range(CALLERS)
        ]
        faults: list[str] = []
        try:
            step = LOAD_SECONDS / (3 * ROUNDS + 1)
            for _ in range(ROUNDS):
                await asyncio.sleep(step)
                await kill_a_worker(cluster)
                faults.append("kill -9 worker")
                await asyncio.sleep(step)
                faults.append(f"ended {await end_backends(database)} PostgreSQL backends")
                await asyncio.sleep(step)
                await restart_redis(own_redis, 2.0)
                faults.append("Redis down 2 s")
            await asyncio.gather(*load)
        finally:
            for task in load:
                task.cancel()
        assert outcomes.counts["ok"] > 50, (outcomes.counts, faults)
        assert not outcomes.wrong, (outcomes.wrong, outcomes.counts)

        # Every task settles, its log contiguous, every event delivered, nothing left over.
        async def settled() -> bool:
            seqs, tasks, _ = await store_view(store_url)
            return bool(tasks) and all(state in TERMINAL for state, _ in tasks.values())

        await eventually(settled, 60, "every task terminal")
        seqs, tasks, _ = await store_view(store_url)
        assert outcomes.acknowledged <= set(tasks), "an acknowledged task is not stored"
        for task_id, (_state, last_seq) in tasks.items():
            got = seqs.get(task_id, [])
            assert got == list(range(1, len(got) + 1)), (task_id, got)
            assert last_seq == len(got), (task_id, last_seq, got)

        def missing() -> set[tuple[str, int]]:
            delivered = {
                (
                    r.headers["idempotency-key"].split("/")[0],
                    int(r.headers["idempotency-key"].split("/")[1]),
                )
                for r in receiver.accepted()
            }
            wanted = {(task_id, seq) for task_id, got in seqs.items() for seq in got}
            return wanted - delivered

        try:
            await eventually(lambda: not missing(), 60, "every event delivered")
        except AssertionError:
            state = await queue_state_of(own_redis.url)
            raise AssertionError(
                f"not delivered: {sorted(missing())[:10]}; queue: {state}"
            ) from None

        client = aioredis.Redis.from_url(own_redis.url, decode_responses=True)
        try:

            async def no_cursors() -> bool:
                return await client.hlen("a2a:push:cursor-tasks") == 0

            # Cursors of tasks never stored wait max_turn_seconds + 10 s, then go.
            await eventually(no_cursors, 60, "no push cursor left")

            async def queue_empty() -> bool:  # no lane holds a job, no retry waits
                return (
                    await client.hlen("a2a:push:head") == 0
                    and await client.zcard("a2a:push:retry") == 0
                )

            # A delivery whose ack Redis never got comes back once its lease (4 s) is up,
            # and goes again (at least once): the lane empties after it.
            await eventually(queue_empty, 30, "every lane and retry drained")
        finally:
            await client.aclose()
        _, _, orphan_configs = await store_view(store_url)
        assert orphan_configs == 0
        stopped = True
        assert await asyncio.to_thread(cluster.stop) == 0, cluster.rest_of_output()
    finally:
        if not stopped:
            await asyncio.to_thread(cluster.stop)
    log = cluster.rest_of_output()
    assert "internal error" not in log.lower(), log[-5000:]
