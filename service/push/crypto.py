"""Push secrets at rest: notification tokens and callback credentials are sealed
with Fernet before they reach any task store, and opened again on read.

Several keys may be configured (`push_secret_keys`): the first seals, all of them
open, so keys rotate by putting a new key first and dropping the old one once
nothing sealed with it is left. Without configured keys one is generated in
DATA_DIR/push-secret.key (mode 0600) on first use.

`SealedConfigStore` wraps any `PushConfigStore`: configs go in sealed and come out
open, so every store gets encryption and reads stay scoped by (tenant, owner).
"""

from __future__ import annotations

import logging
import os
import pathlib
from collections.abc import Callable

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from gen import a2a_pb2 as pb
from service.store import PushConfigStore, Scope

log = logging.getLogger("service.push")

SEALED_PREFIX = "fernet:"
KEY_FILE = "push-secret.key"


class SecretUnavailable(RuntimeError):
    """A sealed value cannot be opened with any configured key."""


def check_key(key: str) -> None:
    """ValueError unless `key` is a Fernet key (32 url-safe base64 bytes)."""
    Fernet(key.encode())


def load_keys(configured: list[str], data_dir: str) -> list[str]:
    if configured:
        return configured
    path = pathlib.Path(data_dir) / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(Fernet.generate_key().decode() + "\n")
            f.flush()
            os.fsync(f.fileno())
        log.info(
            "generated a push secret key file %s in the data directory (set push_secret_keys to manage keys yourself)",
            path.name,
        )
    return [line.strip() for line in path.read_text().splitlines() if line.strip()]


class SecretBox:
    def __init__(self, keys: list[str]) -> None:
        if not keys:
            raise ValueError("at least one key is needed")
        self._fernet = MultiFernet([Fernet(k.encode()) for k in keys])

    def seal(self, text: str) -> str:
        if not text:
            return text
        return SEALED_PREFIX + self._fernet.encrypt(text.encode()).decode()

    def open(self, text: str) -> str:
        if not text.startswith(SEALED_PREFIX):
            return text  # stored before encryption was enabled
        try:
            return self._fernet.decrypt(text[len(SEALED_PREFIX) :].encode()).decode()
        except InvalidToken:
            raise SecretUnavailable(
                "a push secret was sealed with a key that is no longer configured (push_secret_keys)"
            ) from None

    def seal_config(self, config: pb.TaskPushNotificationConfig) -> pb.TaskPushNotificationConfig:
        return self._map(config, self.seal)

    def open_config(self, config: pb.TaskPushNotificationConfig) -> pb.TaskPushNotificationConfig:
        return self._map(config, self.open)

    @staticmethod
    def _map(
        config: pb.TaskPushNotificationConfig, fn: Callable[[str], str]
    ) -> pb.TaskPushNotificationConfig:
        out = pb.TaskPushNotificationConfig()
        out.CopyFrom(config)
        out.token = fn(config.token)
        if config.HasField("authentication"):
            out.authentication.credentials = fn(config.authentication.credentials)
        return out


class SealedConfigStore:
    """A PushConfigStore whose configs' secrets are sealed at rest."""

    def __init__(self, inner: PushConfigStore, box: SecretBox) -> None:
        self.inner = inner
        self.box = box

    async def put_push_config(self, scope: Scope, config: pb.TaskPushNotificationConfig) -> None:
        await self.inner.put_push_config(scope, self.box.seal_config(config))

    async def get_push_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> pb.TaskPushNotificationConfig | None:
        found = await self.inner.get_push_config(scope, task_id, config_id)
        return self.box.open_config(found) if found is not None else None

    async def list_push_configs(
        self, scope: Scope, task_id: str, page_size: int, after_id: str | None
    ) -> tuple[list[pb.TaskPushNotificationConfig], str | None]:
        configs, last = await self.inner.list_push_configs(scope, task_id, page_size, after_id)
        return [self.box.open_config(c) for c in configs], last

    async def delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> bool:
        return await self.inner.delete_push_config(scope, task_id, config_id)
