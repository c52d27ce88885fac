"""Test helpers for push delivery: a real HTTP receiver on loopback, Redis access, waiting."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tests.conftest import missing_part

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


async def redis_or_skip() -> str:
    """REDIS_URL when Redis answers. Outside CI an unreachable Redis skips loudly; under
    CI=true it fails, so a broken CI setup cannot pass silently."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        await asyncio.wait_for(client.ping(), 3)
    except Exception as exc:
        missing_part(f"REDIS NOT REACHABLE at {REDIS_URL} ({exc}): redis-streams tests NOT RUN")
    finally:
        await client.aclose()
    return REDIS_URL


def unique_prefix() -> str:
    return f"test-push:{uuid.uuid4().hex[:12]}"


async def delete_prefix(prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*", count=500)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@dataclass
class Received:
    path: str
    headers: dict[str, str]  # lower-case names
    body: dict
    at: float
    status: int = 0  # what the receiver answered


@dataclass
class Receiver:
    """A tiny HTTP/1.1 server (keep-alive) recording every POST; `respond` picks the reply."""

    respond: Callable[[Received], tuple[int, dict[str, str]]] = field(default=lambda r: (200, {}))
    delay: float = 0.0
    host: str = "127.0.0.1"
    requests: list[Received] = field(default_factory=list)
    server: asyncio.AbstractServer | None = None
    port: int = 0
    _writers: set = field(default_factory=set)

    async def start(self) -> Receiver:
        self.server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/hook"

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in list(self._writers):
                writer.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                _method, path, _ = line.decode().split(" ", 2)
                headers = {}
                while (h := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = h.decode().partition(":")
                    headers[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                got = Received(path, headers, json.loads(body) if body else {}, time.time())
                if self.delay:
                    await asyncio.sleep(self.delay)
                status, extra = self.respond(got)
                got.status = status
                self.requests.append(got)
                head = [
                    f"HTTP/1.1 {status} X",
                    "Content-Length: 2",
                    "Content-Type: application/json",
                ]
                head += [f"{k}: {v}" for k, v in extra.items()]
                writer.write(("\r\n".join(head) + "\r\n\r\n{}").encode())
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def accepted(self) -> list[Received]:
        """Requests answered 2xx, each notification once (dropping repeats by idempotency key)."""
        seen, out = set(), []
        for r in self.requests:
            if 200 <= r.status < 300 and r.headers["idempotency-key"] not in seen:
                seen.add(r.headers["idempotency-key"])
                out.append(r)
        return out


async def eventually(
    predicate: Callable[[], Any], seconds: float = 15.0, what: str = "condition"
) -> None:
    """Wait until predicate() (a bool, or an awaitable of one) is true."""
    deadline = time.monotonic() + seconds
    while True:
        ok = predicate()
        if inspect.isawaitable(ok):
            ok = await ok
        if ok:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        await asyncio.sleep(0.02)


def event_kind(body: dict) -> str:
    return next(iter(body))  # "task" | "statusUpdate" | "artifactUpdate" | "message"
