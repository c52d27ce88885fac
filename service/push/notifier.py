"""`PushNotifications`: the push parts put together (built by the composition root).

engine --on_commit--> Dispatcher --enqueue--> PushQueue --lease--> DeliveryWorker --POST--> receiver
API ---------------> check_url (ssrf) / store_config / delete_config (cursor + sealed store)
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import pathlib
import socket

from gen import a2a_pb2 as pb
from service.protocol.states import TERMINAL
from service.push.crypto import SealedConfigStore, SecretBox, load_keys
from service.push.delivery import DeliveryWorker, RetryPolicy
from service.push.dispatcher import ORPHAN_SECONDS, Dispatcher
from service.push.queue_base import PushQueue
from service.push.settings import PushSettings
from service.push.ssrf import CallbackPolicy, CallbackUnresolvable
from service.push.transport import CallbackClient
from service.store import Scope, Store, StoredEvent

log = logging.getLogger("service.push")

QUEUE_DIR = "push-queue"


def consumer_name(data_dir: str) -> str:
    """The default Redis consumer of this process: the host and its data directory, so two
    processes on one host (`--workers`: DATA_DIR/worker-I) never share one, and a process
    restarted on the same data takes its own unfinished deliveries back at once."""
    where = hashlib.sha256(str(pathlib.Path(data_dir).resolve()).encode()).hexdigest()[:10]
    return f"{socket.gethostname()}:{where}"


def open_queue(s: PushSettings, data_dir: str) -> PushQueue:
    """The queue the settings name (not yet opened); `local-file` lives in `data_dir`."""
    if s.push_queue == "redis-streams":
        from service.push.queue_redis import RedisQueue

        return RedisQueue(
            s.push_redis_url,
            prefix=s.push_redis_prefix,
            stream=s.push_redis_stream,
            retry_key=s.push_redis_retry_key,
            dead_stream=s.push_redis_dead_stream,
            group=s.push_redis_group,
            consumer=s.push_redis_consumer or consumer_name(data_dir),
            lease_seconds=s.push_lease_seconds,
        )
    from service.push.queue_file import FileQueue

    return FileQueue(pathlib.Path(data_dir) / QUEUE_DIR, lease_seconds=s.push_lease_seconds)


class PushNotifications:
    def __init__(
        self,
        store: Store,
        queue: PushQueue,
        policy: CallbackPolicy,
        box: SecretBox,
        retry: RetryPolicy,
        *,
        timeout: float = 10.0,
        concurrency: int = 32,
        host_concurrency: int = 8,
        reconcile_seconds: float = 0.0,
        orphan_seconds: float = ORPHAN_SECONDS,
    ) -> None:
        self.plain_store = store  # tasks and events; configs only for their ids (dispatcher)
        self.configs = SealedConfigStore(store, box)  # configs as the API and delivery see them
        self.queue = queue
        self.policy = policy
        self.dispatcher = Dispatcher(
            store, queue, reconcile_seconds=reconcile_seconds, orphan_seconds=orphan_seconds
        )
        self.client = CallbackClient(policy, timeout=timeout, max_connections=concurrency)
        self.worker = DeliveryWorker(
            queue,
            self.configs.get_push_config,
            self.client,
            retry,
            concurrency=concurrency,
            host_concurrency=host_concurrency,
        )
        self._worker_task: asyncio.Task[None] | None = None

    @classmethod
    def from_settings(
        cls,
        s: PushSettings,
        store: Store,
        data_dir: str,
        *,
        orphan_seconds: float = ORPHAN_SECONDS,
    ) -> PushNotifications:
        """`orphan_seconds`: how long a cursor may wait for its task to be stored (a bound
        on a new task's first turn, when the root knows one)."""
        return cls(
            store,
            open_queue(s, data_dir),
            CallbackPolicy.from_lists(s.push_allow_hosts, s.push_allow_networks),
            SecretBox(load_keys(s.push_secret_keys, data_dir)),
            RetryPolicy(
                max_attempts=s.push_max_attempts,
                max_age=s.push_max_age_seconds,
                base=s.push_retry_base_seconds,
                cap=s.push_retry_max_seconds,
            ),
            timeout=s.push_timeout_seconds,
            concurrency=s.push_concurrency,
            host_concurrency=s.push_host_concurrency,
            reconcile_seconds=s.push_reconcile_seconds,
            orphan_seconds=orphan_seconds,
        )

    # ---- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        await self.queue.open()
        await self.dispatcher.start()
        self._worker_task = asyncio.create_task(self.worker.run(), name="push-delivery")

    async def stop(self) -> None:
        await self.dispatcher.stop()
        await self.worker.stop()
        if self._worker_task is not None:
            self._worker_task.cancel()
            await asyncio.gather(self._worker_task, return_exceptions=True)
        await self.client.close()
        await self.queue.close()

    # ---- engine hook ---------------------------------------------------------------

    def on_commit(self, scope: Scope, task_id: str, batch: list[StoredEvent]) -> None:
        self.dispatcher.on_commit(scope, task_id, batch)

    # ---- API hooks -----------------------------------------------------------------

    async def check_url(self, url: str) -> None:
        """Raises CallbackRefused (a ValueError) with a message for the client. A name that
        does not resolve now is accepted (a DNS hiccup must not fail SendMessage): every
        delivery resolves, checks and pins it again, and retries while it does not resolve."""
        try:
            await self.policy.check(url)
        except CallbackUnresolvable as exc:
            log.info("push callback accepted although it does not resolve yet: %s", exc)

    async def store_config(
        self, scope: Scope, config: pb.TaskPushNotificationConfig, after_seq: int | None
    ) -> None:
        """Store a config; it receives the task's events after `after_seq` (None: after the
        events stored now). Its cursor is written first, so a crash never loses events."""
        key = (scope.tenant, scope.owner, config.task_id)
        if after_seq is None:
            task = await self.plain_store.get(scope, config.task_id)
            if task is not None and task.status.state in TERMINAL:
                await self.configs.put_push_config(scope, config)  # nothing will follow
                return
            after_seq = await self.plain_store.last_seq(scope, config.task_id)
        cursor = (*key, config.id)
        await self.queue.start_cursor(cursor, after_seq)
        await self.configs.put_push_config(scope, config)
        self.dispatcher.config_known(cursor, True)
        self.dispatcher.poke(key)

    async def new_task_config(
        self, scope: Scope, config: pb.TaskPushNotificationConfig
    ) -> pb.TaskPushNotificationConfig:
        """A new task's config: its cursor (from the first event) is written now, before the
        agent may run; the config itself, sealed as returned here, is stored by the engine in
        the same write as the task's first events, so a config never outlives a task that
        was not stored. A cursor whose task never appears is dropped later (Dispatcher)."""
        cursor = (scope.tenant, scope.owner, config.task_id, config.id)
        await self.queue.start_cursor(cursor, 0)
        return self.configs.box.seal_config(config)

    async def delete_config(self, scope: Scope, task_id: str, config_id: str) -> bool:
        cursor = (scope.tenant, scope.owner, task_id, config_id)
        self.dispatcher.config_known(cursor, False)
        await self.queue.drop_cursor(cursor)
        return await self.configs.delete_push_config(scope, task_id, config_id)

    async def get_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> pb.TaskPushNotificationConfig | None:
        return await self.configs.get_push_config(scope, task_id, config_id)

    async def list_configs(
        self, scope: Scope, task_id: str, page_size: int, after_id: str | None
    ) -> tuple[list[pb.TaskPushNotificationConfig], str | None]:
        return await self.configs.list_push_configs(scope, task_id, page_size, after_id)
