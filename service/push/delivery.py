"""The delivery worker: leases jobs, POSTs them, and decides what happens next.

- 2xx: delivered (ack).
- 408, 425, 429, 5xx, timeouts, network errors, unresolvable hosts: retried with
  exponential backoff and jitter, honouring `Retry-After`, until the attempt or
  age limit; then dead.
- Any other status (3xx: redirects are not followed; other 4xx) and a callback
  URL the policy now refuses: dead at once.
- The config was deleted meanwhile: the job is dropped.

At most `concurrency` deliveries run at once and at most `host_concurrency` per
callback host. Jobs for a saturated host wait in memory for one of its slots
without holding a delivery slot (at most `concurrency` of them; beyond that they
are handed back for a moment without counting an attempt), so a slow receiver
holds only its own slots and lanes.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from gen import a2a_pb2 as pb
from service.push.crypto import SecretUnavailable
from service.push.queue_base import Job, Lease, PushQueue
from service.push.ssrf import CallbackRefused, CallbackUnresolvable
from service.push.transport import CallbackClient, Reply, TransportError
from service.store import Scope
from service.telemetry import hub, names

if TYPE_CHECKING:
    from opentelemetry import trace

log = logging.getLogger("service.push")
BACKLOG_SECONDS = 5.0  # how often the redis-streams backlog is counted

RETRYABLE = frozenset({408, 425, 429})
USER_AGENT = "a2a-grpc-service-push/1"
HOST_BUSY_DELAY = 0.05

ConfigLookup = Callable[[Scope, str, str], Awaitable[pb.TaskPushNotificationConfig | None]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 10
    max_age: float = 86400.0
    base: float = 1.0
    cap: float = 300.0

    def delay(self, attempts: int, retry_after: float | None) -> float:
        """Backoff after `attempts` failed attempts: exponential, capped, half jittered."""
        # (int ** int is typed Any: a negative exponent would give a float)
        ceiling: float = min(self.cap, self.base * 2 ** max(0, attempts - 1))
        delay = ceiling / 2 + random.uniform(0, ceiling / 2)
        return max(delay, retry_after) if retry_after is not None else delay


def parse_retry_after(value: str | None, now: float) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now)


def request_headers(job: Job, config: pb.TaskPushNotificationConfig) -> list[tuple[str, str]]:
    headers = [
        ("Content-Type", "application/json"),
        ("User-Agent", USER_AGENT),
        ("Idempotency-Key", job.idempotency_key),
    ]
    if config.HasField("authentication") and config.authentication.credentials:
        scheme = config.authentication.scheme or "Bearer"
        headers.append(("Authorization", f"{scheme} {config.authentication.credentials}"))
    if config.token:
        headers.append(("X-A2A-Notification-Token", config.token))
    return headers


class DeliveryWorker:
    def __init__(
        self,
        queue: PushQueue,
        lookup: ConfigLookup,
        client: CallbackClient,
        retry: RetryPolicy,
        *,
        concurrency: int = 32,
        host_concurrency: int = 8,
    ) -> None:
        self.queue = queue
        self.lookup = lookup
        self.client = client
        self.retry_policy = retry
        self.concurrency = concurrency
        self.host_concurrency = host_concurrency
        self._active: set[asyncio.Task[None]] = set()
        self._per_host: dict[str, int] = {}  # slots in use per callback host
        self._host_waiters: dict[str, collections.deque[asyncio.Future[None]]] = {}
        self._waiting = 0  # deliveries waiting for a host slot
        self._capacity = asyncio.Event()  # set when a delivery ends or starts waiting
        self._stopping = False
        self._backlog_due = 0.0  # when redis-streams' backlog is asked for next
        self.delivered = 0  # counters, for logs and benchmarks
        self.failed = 0

    async def run(self) -> None:
        while not self._stopping:
            free = self.concurrency - (len(self._active) - self._waiting)
            if free <= 0:
                self._capacity.clear()
                await self._capacity.wait()
                continue
            tel = hub.current
            if tel is not None:
                await self._observe_depth(tel)
            try:
                leases = await self.queue.lease(free)
            except Exception as exc:  # e.g. Redis unreachable: keep trying, loudly
                log.error("push queue unavailable (%s); retrying in 1 s", exc)
                await asyncio.sleep(1.0)
                continue
            if not leases:
                await self.queue.wait(1.0)
                continue
            for lease in leases:
                task = asyncio.create_task(self._deliver(lease))
                self._active.add(task)
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._active.discard(task)
        self._capacity.set()

    async def stop(self) -> None:
        self._stopping = True
        for task in list(self._active):
            task.cancel()
        await asyncio.gather(*self._active, return_exceptions=True)

    async def _deliver(self, lease: Lease) -> None:
        try:
            await self._handle(lease)
        except Exception as exc:  # the queue failed us: the lease expires and the job comes back
            log.error(
                "push job %s: %s; it will be handed out again when its lease expires",
                lease.job.id,
                exc,
            )

    async def _handle(self, lease: Lease) -> None:
        job = lease.job
        try:
            config = await self.lookup(Scope(job.tenant, job.owner), job.task_id, job.config_id)
        except SecretUnavailable as exc:
            await self._dead(lease, job, str(exc))
            return
        except Exception as exc:
            await self._retry(lease, job, f"cannot read the push config ({exc})", None)
            return
        if config is None:
            log.info(
                "push job %s: config %s of task %s is gone; dropped",
                job.id,
                job.config_id,
                job.task_id,
            )
            await self.queue.ack(lease)
            if hub.current is not None:
                hub.current.push_outcome("dropped")
            return
        host = _host_of(config.url)
        if not await self._host_slot(host):
            await self.queue.release(lease, time.time() + HOST_BUSY_DELAY)
            return
        try:
            await self._post(lease, job, config)
        finally:
            self._free_host(host)

    async def _host_slot(self, host: str) -> bool:
        """Take a slot of `host`, waiting for one if needed; False when too many wait already."""
        if self._per_host.get(host, 0) < self.host_concurrency:
            self._per_host[host] = self._per_host.get(host, 0) + 1
            return True
        if self._waiting >= self.concurrency:
            return False
        fut = asyncio.get_running_loop().create_future()
        self._host_waiters.setdefault(host, collections.deque()).append(fut)
        self._waiting += 1
        self._capacity.set()
        try:
            await fut  # a finishing delivery hands its slot over
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._free_host(host)
            raise
        finally:
            self._waiting -= 1
        return True

    async def _observe_depth(self, tel: hub.Telemetry) -> None:
        """The queue's backlog for `a2a.push.queue.depth`: local-file knows it at no cost;
        redis-streams asks Redis, at most every BACKLOG_SECONDS."""
        depth = getattr(self.queue, "depth", None)
        if depth is not None:
            tel.push_queue_depth = depth()
            return
        backlog = getattr(self.queue, "backlog", None)
        now = time.monotonic()
        if backlog is None or now < self._backlog_due:
            return
        self._backlog_due = now + BACKLOG_SECONDS
        try:
            tel.push_queue_depth = await backlog()
        except Exception as exc:  # noqa: BLE001 - the lease below says it loudly
            log.debug("push queue backlog unknown: %s", type(exc).__name__)

    def _free_host(self, host: str) -> None:
        waiters = self._host_waiters.get(host)
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                return
        self._host_waiters.pop(host, None)
        self._per_host[host] -= 1
        if not self._per_host[host]:
            del self._per_host[host]

    async def _post(self, lease: Lease, job: Job, config: pb.TaskPushNotificationConfig) -> None:
        tel = hub.current
        if tel is None:
            await self._attempt(lease, job, config, request_headers(job, config))
            return
        # Its own span, in the trace of the turn that committed the event (and linked to
        # it); the receiver gets the span's traceparent.
        span = tel.push_span(job.trace, job.task_id, job.seq, job.attempts + 1, config.url)
        headers = request_headers(job, config)
        carried: dict[str, str] = {}
        hub.inject(carried, span)  # in the configured propagator's format (OTEL_PROPAGATORS)
        headers.extend(carried.items())
        outcome = "dead"
        try:
            outcome = await self._attempt(lease, job, config, headers, span)
        finally:
            tel.push_outcome(outcome)
            span.set_attribute(names.PUSH_OUTCOME, outcome)
            span.end()

    async def _attempt(
        self,
        lease: Lease,
        job: Job,
        config: pb.TaskPushNotificationConfig,
        headers: list[tuple[str, str]],
        span: trace.Span | None = None,
    ) -> str:
        """One POST and what follows; returns the outcome (delivered, retried, dead)."""
        try:
            reply: Reply = await self.client.post(config.url, headers, job.body.encode())
        except CallbackUnresolvable as exc:
            return await self._retry(lease, job, str(exc), None)
        except CallbackRefused as exc:
            return await self._dead(lease, job, f"callback URL refused: {exc}")
        except TimeoutError:
            return await self._retry(lease, job, f"timed out after {self.client.timeout:g} s", None)
        except (OSError, TransportError) as exc:
            return await self._retry(
                lease, job, f"network error: {type(exc).__name__}: {exc}", None
            )
        status = reply.status
        if span is not None:
            span.set_attribute(names.HTTP_STATUS, status)
        if 200 <= status < 300:
            self.delivered += 1
            await self.queue.ack(lease)
            return "delivered"
        if status in RETRYABLE or 500 <= status < 600:
            retry_after = parse_retry_after(reply.headers.get("retry-after"), time.time())
            return await self._retry(lease, job, f"HTTP {status}", retry_after)
        if 300 <= status < 400:
            return await self._dead(lease, job, f"HTTP {status}: redirects are not followed")
        return await self._dead(lease, job, f"HTTP {status}")

    async def _retry(self, lease: Lease, job: Job, error: str, retry_after: float | None) -> str:
        now = time.time()
        job.attempts += 1
        job.last_error = error
        policy = self.retry_policy
        if job.attempts >= policy.max_attempts:
            return await self._dead(
                lease, job, f"gave up after {job.attempts} attempts; last: {error}"
            )
        due = now + policy.delay(job.attempts, retry_after)
        if due - job.created_at > policy.max_age:
            return await self._dead(
                lease,
                job,
                f"gave up after {now - job.created_at:.0f} s "
                f"({job.attempts} attempts); last: {error}",
            )
        log.info(
            "push job %s for task %s: %s; attempt %d, next in %.1f s",
            job.id,
            job.task_id,
            error,
            job.attempts,
            due - now,
        )
        job.due_at = due
        await self.queue.retry(lease, job)
        return "retried"

    async def _dead(self, lease: Lease, job: Job, error: str) -> str:
        self.failed += 1
        job.last_error = error
        log.warning(
            "push job %s for task %s (config %s) is dead: %s",
            job.id,
            job.task_id,
            job.config_id,
            error,
        )
        await self.queue.dead(lease, job, error)
        return "dead"


def _host_of(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""
