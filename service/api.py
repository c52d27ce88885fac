"""A2AApi: the 11 RPCs of lf.a2a.v1.A2AService, transport-free.

Each method takes the request message and a `CallContext` (service parameters
and the caller), and returns the response message or an async iterator of
`StreamResponse`; errors are raised as A2AError. The gRPC servicer and the HTTP
gateway are thin adapters over this one object, so every binding behaves alike.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Protocol

from google.protobuf import empty_pb2, json_format
from google.protobuf.message import Message as ProtoMessage

from gen import a2a_pb2 as pb
from service.agent import Caller
from service.cards.card import Cards
from service.engine.files import StoredFile
from service.engine.limits import HeldStream, Slots
from service.engine.registry import Engine, Turn
from service.inputs.policy import InputPolicy
from service.protocol.errors import (
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    invalid_field,
)
from service.protocol.files import SHA256_HEX
from service.protocol.params import CREDENTIAL_KEYS
from service.protocol.params import CallContext as CallContext  # re-exported: bindings build it
from service.protocol.validation import (
    check_history_length,
    check_id,
    check_message,
    check_required,
    check_tenant,
)
from service.protocol.views import check_page_size, shape_task
from service.store import Scope

PUSH_SECRET_MAX = 4096
_HTTP_TOKEN = re.compile(
    r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}"
)  # an auth scheme name (RFC 9110 token)


# The push config RPCs that name a task (and, but for List, one of its configs).
_PushConfigRequest = (
    pb.GetTaskPushNotificationConfigRequest
    | pb.ListTaskPushNotificationConfigsRequest
    | pb.DeleteTaskPushNotificationConfigRequest
)


class PushConfigs(Protocol):
    """The push config seam (service.push.PushNotifications): where configs are kept, sealed,
    and how delivery learns of them."""

    async def check_url(self, url: str) -> None:
        """Raise ValueError with a client-facing reason when the callback URL may not be called."""

    async def store_config(
        self, scope: Scope, config: pb.TaskPushNotificationConfig, after_seq: int | None
    ) -> None:
        """Store the config; it gets the task's events after `after_seq` (None: from now on)."""

    async def get_config(
        self, scope: Scope, task_id: str, config_id: str
    ) -> pb.TaskPushNotificationConfig | None: ...

    async def list_configs(
        self, scope: Scope, task_id: str, page_size: int, after_id: str | None
    ) -> tuple[list[pb.TaskPushNotificationConfig], str | None]:
        """Ordered by config id; (configs, last id when more follow else None)."""

    async def new_task_config(
        self, scope: Scope, config: pb.TaskPushNotificationConfig
    ) -> pb.TaskPushNotificationConfig:
        """Prepare a new task's config (it gets every event); returns it as the engine stores
        it with the task's first events."""
        ...

    async def delete_config(self, scope: Scope, task_id: str, config_id: str) -> bool: ...


class A2AApi:
    def __init__(
        self,
        engine: Engine,
        cards: Cards,
        *,
        push_notifications: bool = False,
        push: PushConfigs | None = None,
        inputs: InputPolicy | None = None,
        streams: Slots | None = None,
    ) -> None:
        self.engine = engine
        self.cards = cards
        self.push_notifications = push_notifications
        self.push = push  # None: push configs are not offered
        self.inputs = inputs  # None: no limits, media type or workspace checks (service.inputs)
        self.streams = streams if streams is not None and streams.enabled else None

    # ---- shared checks -----------------------------------------------------

    @staticmethod
    def _admit(call: CallContext, request: ProtoMessage) -> Scope:
        """The request's required fields and its tenant, as the scope it acts in. (Whether
        the call may be made at all — the drain, the caller's rate, the version and
        extensions — the call pipeline decided before: service.calls.)"""
        check_required(request)
        return Scope(tenant=check_tenant(request), owner=call.principal)

    def _caller(
        self, call: CallContext, scope: Scope, request: pb.SendMessageRequest | None = None
    ) -> Caller:
        # Credentials never reach the agent, even when this service does not check them.
        metadata = {k: v for k, v in call.metadata.items() if k not in CREDENTIAL_KEYS}
        return Caller(
            principal=call.principal,
            tenant=scope.tenant,
            extensions=call.extensions,
            metadata=metadata,
            request_metadata=(
                json_format.MessageToDict(request.metadata)
                if request is not None and request.HasField("metadata")
                else {}
            ),
        )

    def _configs(self) -> PushConfigs:
        """The push config seam, or PushNotificationNotSupportedError when push is off."""
        if not self.push_notifications or self.push is None:
            raise PushNotificationNotSupportedError(
                "Push notifications are not enabled on this agent (capabilities.pushNotifications is false)."
            )
        return self.push

    # ---- messages ----------------------------------------------------------

    async def _start(
        self, scope: Scope, request: pb.SendMessageRequest, call: CallContext, stream: bool
    ) -> tuple[Turn, int | None]:
        message = request.message
        check_message(message)
        admitted = await self.inputs.check(scope, message) if self.inputs is not None else None
        config = request.configuration
        history = check_history_length(config, "configuration.historyLength")
        push = (
            config.task_push_notification_config
            if config.HasField("task_push_notification_config")
            else None
        )
        follow_up = bool(message.task_id)
        stored: pb.TaskPushNotificationConfig | None = None
        if push is not None:
            self._configs()
            await self._check_push_config(
                push, "configuration.taskPushNotificationConfig", need_task=False
            )
            stored = pb.TaskPushNotificationConfig()
            stored.CopyFrom(push)
            stored.tenant = scope.tenant
            stored.id = stored.id or str(uuid.uuid4())
        if admitted is not None:
            admitted.bind()  # the context keeps this workspace
        caller = self._caller(call, scope, request)
        return_immediately = config.return_immediately and not stream
        if stored is None:
            turn = await self.engine.send(
                scope, message, caller, return_immediately=return_immediately, stream=stream
            )
        elif not follow_up:
            # A new task's config gets every event: prepared before its agent may run, and
            # stored with the task's first events.
            async def store_first(task_id: str) -> list[pb.TaskPushNotificationConfig]:
                stored.task_id = task_id
                return [await self._configs().new_task_config(scope, stored)]

            turn = await self.engine.send(
                scope,
                message,
                caller,
                return_immediately=return_immediately,
                stream=stream,
                before_start=store_first,
            )
        else:
            # An existing task's config: stored first, it gets this turn's events on; a send
            # the engine refuses takes it back.
            stored.task_id = message.task_id
            await self.engine.get(
                scope, message.task_id
            )  # TaskNotFoundError before anything is stored
            await self._store_push_config(
                scope, stored, await self.engine.last_seq(scope, message.task_id)
            )
            try:
                turn = await self.engine.send(
                    scope, message, caller, return_immediately=return_immediately, stream=stream
                )
            except BaseException:
                with contextlib.suppress(Exception):
                    await self._delete_push_config(scope, stored.task_id, stored.id)
                raise
        return turn, history

    async def SendMessage(
        self, request: pb.SendMessageRequest, call: CallContext
    ) -> pb.SendMessageResponse:
        turn, history = await self._start(self._admit(call, request), request, call, stream=False)
        if request.configuration.return_immediately:
            outcome = await self.engine.answer_now(turn)
        else:
            outcome = await self.engine.wait(turn)
        if isinstance(outcome, pb.Message):
            return pb.SendMessageResponse(message=outcome)
        return pb.SendMessageResponse(task=shape_task(outcome, history))

    async def SendStreamingMessage(
        self, request: pb.SendMessageRequest, call: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        scope = self._admit(call, request)  # a draining server or a bad request comes first
        release = self._hold_stream(call)
        try:
            turn, _ = await self._start(scope, request, call, stream=True)
        except BaseException:
            release()
            raise
        assert turn.events is not None
        return self._held(turn.events, release)

    def _hold_stream(self, call: CallContext) -> Callable[[], None]:
        """Take a stream slot of the caller (max_streams_per_principal); how to give it back."""
        streams = self.streams
        if streams is None:
            return _nothing
        principal = call.principal
        streams.take(principal)
        return lambda: streams.give(principal)

    @staticmethod
    def _held(
        events: AsyncIterator[pb.StreamResponse], release: Callable[[], None]
    ) -> AsyncIterator[pb.StreamResponse]:
        if release is _nothing:
            return events
        return HeldStream(events, release)  # type: ignore[arg-type]

    # ---- tasks ---------------------------------------------------------------

    async def GetTask(self, request: pb.GetTaskRequest, call: CallContext) -> pb.Task:
        scope = self._admit(call, request)
        check_id(request.id, "id", required=True)
        history = check_history_length(request)
        return shape_task(await self.engine.get(scope, request.id), history)

    async def ListTasks(
        self, request: pb.ListTasksRequest, call: CallContext
    ) -> pb.ListTasksResponse:
        scope = self._admit(call, request)
        check_id(request.context_id, "contextId")
        check_history_length(request)
        if request.status and request.status not in pb.TaskState.values():
            raise invalid_field("status", f"unknown task state {request.status}")
        return await self.engine.list(scope, request)

    async def CancelTask(self, request: pb.CancelTaskRequest, call: CallContext) -> pb.Task:
        scope = self._admit(call, request)
        check_id(request.id, "id", required=True)
        return shape_task(await self.engine.cancel(scope, request.id), None)

    async def SubscribeToTask(
        self, request: pb.SubscribeToTaskRequest, call: CallContext
    ) -> AsyncIterator[pb.StreamResponse]:
        scope = self._admit(call, request)
        check_id(request.id, "id", required=True)
        release = self._hold_stream(call)
        try:
            events = await self.engine.subscribe(scope, request.id, call.resume_after)
        except BaseException:
            release()
            raise
        return self._held(events, release)

    # ---- push notification configs ----------------------------------------------

    async def _check_push_config(
        self, config: pb.TaskPushNotificationConfig, prefix: str, need_task: bool
    ) -> None:
        def name(field: str) -> str:
            return f"{prefix}.{field}" if prefix else field

        check_id(config.task_id, name("taskId"), required=need_task)
        check_id(config.id, name("id"))
        if not config.url.startswith(("http://", "https://")):
            raise invalid_field(name("url"), "must be an absolute http:// or https:// URL")
        _check_header_value(config.token, name("token"))
        if config.HasField("authentication"):
            auth = config.authentication
            if auth.scheme and not _HTTP_TOKEN.fullmatch(auth.scheme):
                raise invalid_field(
                    name("authentication.scheme"), "must be an HTTP auth scheme name like Bearer"
                )
            _check_header_value(auth.credentials, name("authentication.credentials"))
        if self.push is not None:
            try:
                await self.push.check_url(config.url)  # SSRF rules: refused here, not at delivery
            except ValueError as exc:
                raise invalid_field(name("url"), str(exc)) from None

    async def _store_push_config(
        self, scope: Scope, config: pb.TaskPushNotificationConfig, after_seq: int | None
    ) -> None:
        await self._configs().store_config(scope, config, after_seq)

    async def _delete_push_config(self, scope: Scope, task_id: str, config_id: str) -> None:
        await self._configs().delete_config(scope, task_id, config_id)

    async def _push_scope(
        self, request: _PushConfigRequest, call: CallContext, *, config_id: str | None
    ) -> Scope:
        """Shared entry of the Get/List/Delete config RPCs: capability, admission, ids, and
        the task must be the caller's (TaskNotFoundError otherwise). `config_id`: the request's
        config id (None for List, which names none)."""
        self._configs()
        scope = self._admit(call, request)
        check_id(request.task_id, "taskId", required=True)
        if config_id is not None:
            check_id(config_id, "id", required=True)
        await self._task_must_exist(scope, request.task_id)
        return scope

    async def _task_must_exist(self, scope: Scope, task_id: str) -> None:
        await self.engine.get(scope, task_id)  # TaskNotFoundError for unknown or foreign tasks

    async def CreateTaskPushNotificationConfig(
        self, request: pb.TaskPushNotificationConfig, call: CallContext
    ) -> pb.TaskPushNotificationConfig:
        self._configs()
        scope = self._admit(call, request)
        await self._check_push_config(request, "", need_task=True)
        await self._task_must_exist(scope, request.task_id)
        stored = pb.TaskPushNotificationConfig()
        stored.CopyFrom(request)
        stored.id = stored.id or str(uuid.uuid4())
        await self._store_push_config(scope, stored, None)
        return stored

    async def GetTaskPushNotificationConfig(
        self, request: pb.GetTaskPushNotificationConfigRequest, call: CallContext
    ) -> pb.TaskPushNotificationConfig:
        scope = await self._push_scope(request, call, config_id=request.id)
        found = await self._configs().get_config(scope, request.task_id, request.id)
        if found is None:
            raise TaskNotFoundError(
                f"Push notification config {request.id} not found for task {request.task_id}."
            )
        return found

    async def ListTaskPushNotificationConfigs(
        self, request: pb.ListTaskPushNotificationConfigsRequest, call: CallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        self._configs()  # before any other check, as on every push operation
        page_size = check_page_size(request.page_size or None)
        if request.page_token:
            check_id(request.page_token, "pageToken")
        scope = await self._push_scope(request, call, config_id=None)
        configs, last = await self._configs().list_configs(
            scope, request.task_id, page_size, request.page_token or None
        )
        return pb.ListTaskPushNotificationConfigsResponse(
            configs=configs, next_page_token=last or ""
        )

    async def DeleteTaskPushNotificationConfig(
        self, request: pb.DeleteTaskPushNotificationConfigRequest, call: CallContext
    ) -> empty_pb2.Empty:
        scope = await self._push_scope(request, call, config_id=request.id)
        await self._delete_push_config(scope, request.task_id, request.id)
        return empty_pb2.Empty()  # deleting an absent config is not an error (idempotent)

    # ---- stored file artifacts (the gateway's download route, not an RPC) -------

    async def stored_file(
        self, call: CallContext, tenant: str, task_id: str, sha256: str
    ) -> StoredFile:
        """A task's stored file, for the task's owner in its tenant; anyone else gets
        TaskNotFoundError exactly as from GetTask. (A plain download: the call pipeline
        asks no A2A-Version of it, but counts it against the caller's rate limit.)"""
        check_id(tenant, "tenant")
        check_id(task_id, "taskId", required=True)
        if not SHA256_HEX.fullmatch(sha256):
            raise TaskNotFoundError(
                f"Task {task_id} has no stored file by that name (its SHA-256, lower-case hex)."
            )
        return await self.engine.stored_file(Scope(tenant, call.principal), task_id, sha256)

    # ---- agent card ------------------------------------------------------------

    async def GetExtendedAgentCard(
        self, request: pb.GetExtendedAgentCardRequest, call: CallContext
    ) -> pb.AgentCard:
        self._admit(call, request)
        return self.cards.extended_card()


def _nothing() -> None:
    """No slot was taken (the limit is off)."""


def _check_header_value(value: str, field: str) -> None:
    """Secrets end up in HTTP headers: printable text of bounded size only."""
    if len(value) > PUSH_SECRET_MAX:
        raise invalid_field(field, f"must be at most {PUSH_SECRET_MAX} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in value) or not value.isascii():
        raise invalid_field(field, "must be printable ASCII (no control characters or line breaks)")
