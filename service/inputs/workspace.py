"""Workspaces: where a message may point on the server's disk.

A message may name its working directory in its metadata, under this service's
own namespace: `metadata["a2a_service"]["cwd"]`. It must be an existing
absolute directory inside one of the configured workspace roots, checked after
resolving symlinks. There are no roots unless `workspace_roots` is set: this
service is network-facing, so by default no message may point at the server's
disk at all. A context keeps the workspace of its first accepted
message: a later message in the same context that names another one is
refused; one that names none inherits it (the accepted message carries the
resolved directory, so the agent and the stored history see it).

`file://` URL parts must name existing, readable regular files inside the
message's workspace, or inside the roots when it has none.

A refusal that depends on the disk says the same thing whatever the reason
(missing, a directory, unreadable, too big, outside the roots, the service's
own state): the caller must not learn what exists on the server. The reason is
logged for the operator (logger `service.workspace`, INFO). Only syntax
(a relative path) gets its own message.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Protocol

from google.protobuf import struct_pb2

from gen import a2a_pb2 as pb
from service.agent import CWD_KEY, NAMESPACE
from service.agent import cwd_of as cwd_of  # re-exported: for agents
from service.protocol.errors import A2AError, invalid_field
from service.protocol.ids import uuid7
from service.store import Scope

CWD_FIELD = f"message.metadata.{NAMESPACE}.{CWD_KEY}"
MAX_PATH_CHARS = 4096
BINDINGS_KEPT = (
    10_000  # contexts whose workspace is remembered in memory (the store is the fallback)
)
UNBOUND = ""  # a context that started without a working directory
# What the caller learns when a path is refused for any reason that depends on the disk.
FILE_REFUSED = "does not name an allowed readable file within the configured limits"
DIR_REFUSED = "does not name an allowed working directory"
NO_ROOTS = "workspace_roots is not configured (file:// parts and working directories are off)"

log = logging.getLogger("service.workspace")


def refusal(field: str, message: str, reason: str, path: str) -> A2AError:
    """The caller's error (`message`, the same for every reason) after logging the real
    reason for the operator. The path itself stays out of the log (a client's paths say
    what is on its disk, and logs travel further than answers): a fingerprint stands in,
    which the operator can compare with `fingerprint(path)` of a path the caller names."""
    log.info("refused %s: %s (path %s)", field, reason, fingerprint(path))
    return invalid_field(field, message)


def fingerprint(path: str) -> str:
    """A short stand-in for a path in the log: `sha256:` + 12 hex digits, and its length."""
    digest = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"sha256:{digest}, {len(path)} chars"


def message_cwd(message: pb.Message) -> str | None:
    """The working directory a message names (unchecked), or None."""
    if not message.HasField("metadata"):
        return None
    ours = message.metadata.fields.get(NAMESPACE)
    if ours is None:
        return None
    if ours.WhichOneof("kind") != "struct_value":
        raise invalid_field(f"message.metadata.{NAMESPACE}", "must be an object")
    value = ours.struct_value.fields.get(CWD_KEY)
    if value is None:
        return None
    if value.WhichOneof("kind") != "string_value" or not value.string_value:
        raise invalid_field(CWD_FIELD, "must be a non-empty string (an absolute directory path)")
    cwd: str = value.string_value
    return cwd


def set_message_cwd(message: pb.Message, cwd: str) -> None:
    ours = message.metadata.fields[NAMESPACE]
    if ours.WhichOneof("kind") != "struct_value":
        ours.struct_value.CopyFrom(struct_pb2.Struct())
    ours.struct_value.fields[CWD_KEY].string_value = cwd


def is_inside(path: str, base: str) -> bool:
    return path == base or path.startswith(base.rstrip(os.sep) + os.sep)


def _well_formed(path: str) -> bool:
    """An absolute path the OS can take (checked without touching the disk)."""
    return os.path.isabs(path) and len(path) <= MAX_PATH_CHARS and "\x00" not in path


def _real(path: str) -> str | None:
    """The absolute path with symlinks resolved, or None when the name is unusable."""
    if len(path) > MAX_PATH_CHARS or "\x00" in path:
        return None
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


class ContextLookup(Protocol):
    async def __call__(self, scope: Scope, message: pb.Message) -> tuple[str, str | None]:
        """(context id, its recorded working directory: a path, UNBOUND, or None if unknown)."""


class Workspaces:
    def __init__(
        self, roots: Iterable[str], lookup: ContextLookup | None = None, denied: Iterable[str] = ()
    ) -> None:
        self.roots = [r for r in (_real(os.path.abspath(root)) for root in roots) if r]
        # The service's own state and secret files stay out of reach even inside a root.
        self.denied = [d for d in (_real(os.path.abspath(path)) for path in denied if path) if d]
        self.lookup = lookup
        self._bound: OrderedDict[tuple[Scope, str], str] = OrderedDict()  # oldest bind first
        self._bound_at: dict[tuple[Scope, str], float] = {}  # when each was bound (monotonic)

    def inside_roots(self, real: str) -> bool:
        return self._outside(real) is None

    def _outside(self, real: str) -> str | None:
        """Why a resolved path is out of reach (for the log), or None when it is inside."""
        if any(is_inside(real, d) for d in self.denied):
            return "the service's own state or secret files"
        if not any(is_inside(real, root) for root in self.roots):
            return "outside the workspace roots"
        return None

    def check_dir(self, raw: str) -> str:
        """The resolved directory a message names, or InvalidParams (the path is never echoed,
        and every refusal but a relative path reads the same)."""
        if not os.path.isabs(raw):
            raise invalid_field(CWD_FIELD, "must be an absolute path")
        real = self._resolved(raw, CWD_FIELD, DIR_REFUSED)
        outside = self._outside(real)
        if outside is not None:
            raise refusal(CWD_FIELD, DIR_REFUSED, outside, raw)
        if not os.path.isdir(real):
            raise refusal(CWD_FIELD, DIR_REFUSED, "not an existing directory", raw)
        return real

    def _resolved(self, raw: str, field: str, refused: str) -> str:
        """The real path a message names, or the refusal when there are no roots or the
        name resolves to nothing usable (the first steps of both checks)."""
        if not self.roots:
            raise refusal(field, refused, NO_ROOTS, raw)
        real = _real(raw)
        if real is None:
            raise refusal(field, refused, "not a usable path name", raw)
        return real

    def _usable(self, recorded: str) -> str | None:
        real = _real(recorded)
        return (
            real if real is not None and self.inside_roots(real) and os.path.isdir(real) else None
        )

    def check_file(self, raw_path: str, workspace: str | None, field: str) -> tuple[str, int]:
        """(resolved path, size) of a readable regular file a `file://` URL names, inside the
        workspace (or the roots when there is none); every refusal but a malformed name
        reads FILE_REFUSED."""
        if not _well_formed(raw_path):
            raise invalid_field(field, "must be an absolute file:// URL")
        real = self._resolved(raw_path, field, FILE_REFUSED)
        outside = self._outside(real)
        if outside is None and workspace is not None and not is_inside(real, workspace):
            outside = "outside the message's working directory"
        if outside is not None:
            raise refusal(field, FILE_REFUSED, outside, raw_path)
        try:
            st = os.stat(real)
        except (OSError, ValueError) as exc:
            raise refusal(
                field, FILE_REFUSED, f"cannot stat it ({_os_reason(exc)})", raw_path
            ) from None
        if not stat.S_ISREG(st.st_mode):
            raise refusal(field, FILE_REFUSED, "not a regular file", raw_path)
        if not os.access(real, os.R_OK):
            raise refusal(field, FILE_REFUSED, "not readable by the service", raw_path)
        return real, st.st_size

    async def resolve(self, scope: Scope, message: pb.Message) -> tuple[str, str | None]:
        """(context key, the message's working directory) after the context rules;
        nothing is recorded yet (see `bind`)."""
        requested = message_cwd(message)
        real = self.check_dir(requested) if requested is not None else None
        context_id, recorded = await self._recorded(scope, message)
        if recorded is None:  # a new context: this message decides
            return context_id, real
        if real is None:
            if recorded and recorded != self._usable(recorded):
                raise invalid_field(
                    CWD_FIELD,
                    "the working directory of this context is no longer "
                    "usable; use a new contextId",
                )
            return context_id, recorded or None
        if recorded == UNBOUND:
            raise invalid_field(
                CWD_FIELD,
                "this context started without a working directory; "
                "use a new contextId for another workspace",
            )
        if real != recorded:
            raise invalid_field(
                CWD_FIELD,
                "differs from the working directory of this context; "
                "use a new contextId for another workspace",
            )
        return context_id, real

    async def _recorded(self, scope: Scope, message: pb.Message) -> tuple[str, str | None]:
        if not message.task_id and not message.context_id:
            # A new context: name it now (the engine keeps a given id) so it can be bound.
            message.context_id = uuid7()
            return message.context_id, None
        if message.context_id:
            remembered = self._bound.get((scope, message.context_id))
            if remembered is not None:
                return message.context_id, remembered
        if self.lookup is None:
            return message.context_id, None
        context_id, recorded = await self.lookup(scope, message)
        if recorded is None and context_id:
            recorded = self._bound.get((scope, context_id))
        return context_id, recorded

    def bind(self, scope: Scope, context_id: str, cwd: str | None) -> None:
        """Record a context's workspace (the first accepted message wins; a racing message
        that names another one is refused)."""
        if not context_id:
            return
        key = (scope, context_id)
        value = cwd or UNBOUND
        current = self._bound.get(key)
        if current is not None and current != value:
            raise invalid_field(
                CWD_FIELD,
                "another message just started this context with a different working directory",
            )
        self._bound[key] = value
        self._bound.move_to_end(key)
        self._bound_at[key] = time.monotonic()
        while len(self._bound) > BINDINGS_KEPT:
            self._bound_at.pop(self._bound.popitem(last=False)[0], None)

    def evict_idle(self, idle_seconds: float) -> int:
        """Forget the workspaces of contexts not bound for `idle_seconds` (context_idle_timeout);
        the rule still holds for them through the store lookup. Returns how many went."""
        cutoff = time.monotonic() - idle_seconds
        evicted = 0
        while self._bound:
            key = next(iter(self._bound))
            if self._bound_at.get(key, 0.0) > cutoff:
                break
            del self._bound[key]
            self._bound_at.pop(key, None)
            evicted += 1
        return evicted


def _os_reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) else None) or type(exc).__name__


def recorded_cwd(messages: Sequence[pb.Message]) -> str:
    """The working directory a stored task's user messages carry (UNBOUND if none)."""
    for message in messages:
        if message.role == pb.ROLE_USER:
            try:
                cwd = message_cwd(message)
            except Exception:  # noqa: BLE001 - stored data from before these rules
                cwd = None
            return cwd or UNBOUND
    return UNBOUND


class TaskReader(Protocol):
    """What a context lookup reads (the engine offers it): committed or live tasks."""

    async def get(self, scope: Scope, task_id: str) -> pb.Task: ...

    async def latest_in_context(self, scope: Scope, context_id: str) -> pb.Task | None: ...


class StoreContextLookup:
    """Finds a context's workspace among its tasks, so the rule survives restarts."""

    def __init__(self, tasks: TaskReader) -> None:
        self.tasks = tasks

    async def __call__(self, scope: Scope, message: pb.Message) -> tuple[str, str | None]:
        if message.task_id:  # a follow-up: the task's context (TaskNotFound if it is not there)
            task = await self.tasks.get(scope, message.task_id)
            return task.context_id, recorded_cwd(task.history)
        if not message.context_id:
            return "", None
        latest = await self.tasks.latest_in_context(scope, message.context_id)
        if latest is None:
            return message.context_id, None
        return message.context_id, recorded_cwd(latest.history)
