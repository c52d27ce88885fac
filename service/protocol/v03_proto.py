"""A2A v0.3 protobuf messages (package `a2a.v1`) ⇄ the 1.0 ones (`lf.a2a.v1`), no I/O.

The v0.3 gRPC and REST bindings translate at their edge with these functions, so one
`A2AApi` serves both versions. What differs, rule by rule:

- a message's parts are `content` in v0.3, `parts` in 1.0 (no `reference_task_ids` in v0.3);
- a file part is `file {file_with_uri | file_with_bytes, mime_type, name}` in v0.3, and
  `url` / `raw` with `media_type` / `filename` beside them in 1.0;
- a data part is a JSON object (`Struct`) in v0.3 and any JSON value in 1.0: a value that
  is not an object travels as `{"value": v}` with the part metadata `data_part_compat:
  true` (a2a-sdk's convention), and comes back unwrapped;
- roles and task states have the same numbers (v0.3 spells CANCELLED with two Ls); a
  status's message is `update` in v0.3 (JSON `message`);
- a status update is `final` in v0.3 when the task is terminal or interrupted: the
  stream ends there;
- `history_length` 0 means "all of it" in v0.3 (unset in 1.0); `blocking` is the inverse
  of `return_immediately`, and a request without `configuration` blocks;
- push configs: v0.3 names them `tasks/{task}/pushNotificationConfigs/{id}` and lists
  several authentication `schemes`; 1.0 holds one `scheme` (the first one taken);
- tasks and configs are named `tasks/{id}` in v0.3, bare ids in 1.0; v0.3 has no tenant.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

from google.protobuf.message import Message as ProtoMessage

from gen import a2a_pb2 as pb
from gen import a2a_v0_3_pb2 as v03
from service.protocol.errors import ALL_ERRORS, A2AError, invalid_field
from service.protocol.states import SETTLED

DATA_PART_COMPAT = "data_part_compat"  # a2a-sdk's marker of a wrapped non-object data part

_TASK_NAME = re.compile(r"tasks/([^/]+)")
_CONFIG_NAME = re.compile(r"tasks/([^/]+)/pushNotificationConfigs/([^/]+)")

M = TypeVar("M", bound=ProtoMessage)


def _same_wire(message: ProtoMessage, cls: type[M]) -> M:
    """`message` as `cls`, a message of the other version with the same field numbers and
    types (card parts): fields only one version has are dropped."""
    out: M = cls()
    out.ParseFromString(message.SerializeToString())
    out.DiscardUnknownFields()
    return out


# ---- names --------------------------------------------------------------------------


def task_id_of(name: str, field: str = "name") -> str:
    """'tasks/{id}' -> id (InvalidParams naming `field` otherwise)."""
    found = _TASK_NAME.fullmatch(name)
    if found is None:
        raise invalid_field(field, f"must be 'tasks/{{task_id}}', got {name!r}")
    return found.group(1)


def config_ids_of(name: str, field: str = "name") -> tuple[str, str]:
    """'tasks/{task}/pushNotificationConfigs/{id}' -> (task, id)."""
    found = _CONFIG_NAME.fullmatch(name)
    if found is None:
        raise invalid_field(
            field,
            f"must be 'tasks/{{task_id}}/pushNotificationConfigs/{{config_id}}', got {name!r}",
        )
    return found.group(1), found.group(2)


def config_name(task_id: str, config_id: str) -> str:
    return f"tasks/{task_id}/pushNotificationConfigs/{config_id}"


# ---- enums ----------------------------------------------------------------------------


def state_in(state: int) -> pb.TaskState:
    """v0.3 state -> 1.0 state (the same numbers; CANCELLED is CANCELED)."""
    return cast("pb.TaskState", state)


def state_out(state: int) -> v03.TaskState:
    return cast("v03.TaskState", state)


def role_in(role: int) -> pb.Role:
    return cast("pb.Role", role)


def role_out(role: int) -> v03.Role:
    return cast("v03.Role", role)


# ---- parts, messages, artifacts -----------------------------------------------------


def part_in(part: v03.Part) -> pb.Part:
    out = pb.Part()
    if part.HasField("metadata"):
        out.metadata.CopyFrom(part.metadata)
    which = part.WhichOneof("part")
    if which == "text":
        out.text = part.text
    elif which == "file":
        file = part.file
        if file.WhichOneof("file") == "file_with_bytes":
            out.raw = file.file_with_bytes
        elif file.WhichOneof("file") == "file_with_uri":
            out.url = file.file_with_uri
        out.media_type = file.mime_type
        out.filename = file.name
    elif which == "data":
        fields = out.metadata.fields
        if DATA_PART_COMPAT in fields and fields[DATA_PART_COMPAT].bool_value:
            del fields[DATA_PART_COMPAT]
            if not fields:
                out.ClearField("metadata")
            out.data.CopyFrom(part.data.data.fields["value"])
        else:
            out.data.struct_value.CopyFrom(part.data.data)
    return out


def part_out(part: pb.Part) -> v03.Part:
    out = v03.Part()
    if part.HasField("metadata"):
        out.metadata.CopyFrom(part.metadata)
    which = part.WhichOneof("content")
    if which == "text":
        out.text = part.text
    elif which in ("raw", "url"):
        if which == "raw":
            out.file.file_with_bytes = part.raw
        else:
            out.file.file_with_uri = part.url
        out.file.mime_type = part.media_type
        out.file.name = part.filename
    elif which == "data":
        if part.data.WhichOneof("kind") == "struct_value":
            out.data.data.CopyFrom(part.data.struct_value)
        else:
            out.data.data.fields["value"].CopyFrom(part.data)
            out.metadata.fields[DATA_PART_COMPAT].bool_value = True
    return out


def message_in(message: v03.Message) -> pb.Message:
    out = pb.Message(
        message_id=message.message_id,
        context_id=message.context_id,
        task_id=message.task_id,
        role=role_in(message.role),
        parts=[part_in(p) for p in message.content],
        extensions=message.extensions,
    )
    if message.HasField("metadata"):
        out.metadata.CopyFrom(message.metadata)
    return out


def message_out(message: pb.Message) -> v03.Message:
    out = v03.Message(
        message_id=message.message_id,
        context_id=message.context_id,
        task_id=message.task_id,
        role=role_out(message.role),
        content=[part_out(p) for p in message.parts],
        extensions=message.extensions,
    )
    if message.HasField("metadata"):
        out.metadata.CopyFrom(message.metadata)
    return out


def artifact_out(artifact: pb.Artifact) -> v03.Artifact:
    out = v03.Artifact(
        artifact_id=artifact.artifact_id,
        name=artifact.name,
        description=artifact.description,
        parts=[part_out(p) for p in artifact.parts],
        extensions=artifact.extensions,
    )
    if artifact.HasField("metadata"):
        out.metadata.CopyFrom(artifact.metadata)
    return out


def artifact_in(artifact: v03.Artifact) -> pb.Artifact:
    out = pb.Artifact(
        artifact_id=artifact.artifact_id,
        name=artifact.name,
        description=artifact.description,
        parts=[part_in(p) for p in artifact.parts],
        extensions=artifact.extensions,
    )
    if artifact.HasField("metadata"):
        out.metadata.CopyFrom(artifact.metadata)
    return out


# ---- tasks and events -----------------------------------------------------------------


def status_out(status: pb.TaskStatus) -> v03.TaskStatus:
    out = v03.TaskStatus(state=state_out(status.state))
    if status.HasField("message"):
        out.update.CopyFrom(message_out(status.message))
    if status.HasField("timestamp"):
        out.timestamp.CopyFrom(status.timestamp)
    return out


def status_in(status: v03.TaskStatus) -> pb.TaskStatus:
    out = pb.TaskStatus(state=state_in(status.state))
    if status.HasField("update"):
        out.message.CopyFrom(message_in(status.update))
    if status.HasField("timestamp"):
        out.timestamp.CopyFrom(status.timestamp)
    return out


def task_out(task: pb.Task) -> v03.Task:
    out = v03.Task(
        id=task.id,
        context_id=task.context_id,
        artifacts=[artifact_out(a) for a in task.artifacts],
        history=[message_out(m) for m in task.history],
    )
    if task.HasField("status"):
        out.status.CopyFrom(status_out(task.status))
    if task.HasField("metadata"):
        out.metadata.CopyFrom(task.metadata)
    return out


def task_in(task: v03.Task) -> pb.Task:
    out = pb.Task(
        id=task.id,
        context_id=task.context_id,
        artifacts=[artifact_in(a) for a in task.artifacts],
        history=[message_in(m) for m in task.history],
    )
    if task.HasField("status"):
        out.status.CopyFrom(status_in(task.status))
    if task.HasField("metadata"):
        out.metadata.CopyFrom(task.metadata)
    return out


def is_final(state: int) -> bool:
    """v0.3's `final`: the task is terminal or waits for the client (the stream ends)."""
    return state in SETTLED


def stream_out(event: pb.StreamResponse) -> v03.StreamResponse:
    out = v03.StreamResponse()
    which = event.WhichOneof("payload")
    if which == "task":
        out.task.CopyFrom(task_out(event.task))
    elif which == "message":
        out.msg.CopyFrom(message_out(event.message))
    elif which == "status_update":
        update = event.status_update
        status = out.status_update
        status.task_id = update.task_id
        status.context_id = update.context_id
        status.status.CopyFrom(status_out(update.status))
        status.final = is_final(update.status.state)
        if update.HasField("metadata"):
            status.metadata.CopyFrom(update.metadata)
    elif which == "artifact_update":
        update_a = event.artifact_update
        artifact = out.artifact_update
        artifact.task_id = update_a.task_id
        artifact.context_id = update_a.context_id
        artifact.artifact.CopyFrom(artifact_out(update_a.artifact))
        artifact.append = update_a.append
        artifact.last_chunk = update_a.last_chunk
        if update_a.HasField("metadata"):
            artifact.metadata.CopyFrom(update_a.metadata)
    return out


def send_response_out(response: pb.SendMessageResponse) -> v03.SendMessageResponse:
    if response.HasField("message"):
        return v03.SendMessageResponse(msg=message_out(response.message))
    if response.HasField("task"):
        return v03.SendMessageResponse(task=task_out(response.task))
    return v03.SendMessageResponse()


# ---- push configs -----------------------------------------------------------------------


def push_config_in(
    config: v03.PushNotificationConfig, task_id: str = ""
) -> pb.TaskPushNotificationConfig:
    """v0.3 config -> 1.0; of several authentication schemes the first is kept."""
    out = pb.TaskPushNotificationConfig(
        id=config.id, task_id=task_id, url=config.url, token=config.token
    )
    if config.HasField("authentication"):
        auth = config.authentication
        out.authentication.scheme = auth.schemes[0] if auth.schemes else ""
        out.authentication.credentials = auth.credentials
    return out


def push_config_out(config: pb.TaskPushNotificationConfig) -> v03.PushNotificationConfig:
    out = v03.PushNotificationConfig(id=config.id, url=config.url, token=config.token)
    if config.HasField("authentication"):
        auth = config.authentication
        out.authentication.schemes.extend([auth.scheme] if auth.scheme else [])
        out.authentication.credentials = auth.credentials
    return out


def task_config_out(config: pb.TaskPushNotificationConfig) -> v03.TaskPushNotificationConfig:
    return v03.TaskPushNotificationConfig(
        name=config_name(config.task_id, config.id),
        push_notification_config=push_config_out(config),
    )


# ---- requests -------------------------------------------------------------------------------


def send_request_in(request: v03.SendMessageRequest) -> pb.SendMessageRequest:
    out = pb.SendMessageRequest(message=message_in(request.request))
    if request.HasField("metadata"):
        out.metadata.CopyFrom(request.metadata)
    if request.HasField("configuration"):
        config = request.configuration
        target = out.configuration
        target.accepted_output_modes.extend(config.accepted_output_modes)
        target.return_immediately = not config.blocking
        if config.history_length:  # 0: all of the history, which 1.0 says by leaving it unset
            target.history_length = config.history_length
        if config.HasField("push_notification"):
            target.task_push_notification_config.CopyFrom(push_config_in(config.push_notification))
    return out


def get_task_in(request: v03.GetTaskRequest) -> pb.GetTaskRequest:
    out = pb.GetTaskRequest(id=task_id_of(request.name))
    if request.history_length:
        out.history_length = request.history_length
    return out


def cancel_task_in(request: v03.CancelTaskRequest) -> pb.CancelTaskRequest:
    return pb.CancelTaskRequest(id=task_id_of(request.name))


def subscribe_in(request: v03.TaskSubscriptionRequest) -> pb.SubscribeToTaskRequest:
    return pb.SubscribeToTaskRequest(id=task_id_of(request.name))


def create_config_in(
    request: v03.CreateTaskPushNotificationConfigRequest,
) -> pb.TaskPushNotificationConfig:
    """The task from `parent` (`tasks/{id}`, or the REST route's collection
    `tasks/{id}/pushNotificationConfigs`) or else the config's own name; the id from
    `config_id`, else the config's `name`, else its `id`."""
    parent = request.parent.removesuffix("/pushNotificationConfigs")  # REST: the collection
    task_id = task_id_of(parent, "parent") if parent else ""
    config = request.config
    named_task, named_id = config_ids_of(config.name, "config.name") if config.name else ("", "")
    out = push_config_in(config.push_notification_config, task_id or named_task)
    out.id = request.config_id or named_id or out.id
    return out


def get_config_in(
    request: v03.GetTaskPushNotificationConfigRequest,
) -> pb.GetTaskPushNotificationConfigRequest:
    task_id, config_id = config_ids_of(request.name)
    return pb.GetTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)


def delete_config_in(
    request: v03.DeleteTaskPushNotificationConfigRequest,
) -> pb.DeleteTaskPushNotificationConfigRequest:
    task_id, config_id = config_ids_of(request.name)
    return pb.DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=config_id)


def list_configs_in(
    request: v03.ListTaskPushNotificationConfigRequest,
) -> pb.ListTaskPushNotificationConfigsRequest:
    return pb.ListTaskPushNotificationConfigsRequest(
        task_id=task_id_of(request.parent, "parent"),
        page_size=request.page_size,
        page_token=request.page_token,
    )


def list_configs_out(
    response: pb.ListTaskPushNotificationConfigsResponse,
) -> v03.ListTaskPushNotificationConfigResponse:
    return v03.ListTaskPushNotificationConfigResponse(
        configs=[task_config_out(c) for c in response.configs],
        next_page_token=response.next_page_token,
    )


# ---- the agent card ----------------------------------------------------------------------


def card_out(card: pb.AgentCard, *, extended: bool = False) -> v03.AgentCard:
    """The 1.0 card in v0.3's shape: the first interface that serves v0.3 (or else the
    first one) is `url` / `preferred_transport`, the others `additional_interfaces`.
    Signatures are left out: they sign the 1.0 form, not this one."""
    interfaces = list(card.supported_interfaces)
    v03_first = sorted(interfaces, key=lambda i: i.protocol_version != "0.3")
    seen: set[tuple[str, str]] = set()
    listed: list[v03.AgentInterface] = []
    for interface in v03_first:
        key = (interface.url, interface.protocol_binding)
        if key not in seen:
            seen.add(key)
            listed.append(
                v03.AgentInterface(url=interface.url, transport=interface.protocol_binding)
            )
    out = v03.AgentCard(
        protocol_version="0.3.0",
        name=card.name,
        description=card.description,
        url=listed[0].url if listed else "",
        preferred_transport=listed[0].transport if listed else "",
        additional_interfaces=listed,
        version=card.version,
        documentation_url=card.documentation_url,
        default_input_modes=card.default_input_modes,
        default_output_modes=card.default_output_modes,
        skills=[_same_wire(s, v03.AgentSkill) for s in card.skills],
        security=[_same_wire(r, v03.Security) for r in card.security_requirements],
        supports_authenticated_extended_card=card.capabilities.extended_agent_card and not extended,
        icon_url=card.icon_url,
    )
    if card.HasField("provider"):
        out.provider.CopyFrom(_same_wire(card.provider, v03.AgentProvider))
    out.capabilities.CopyFrom(_same_wire(card.capabilities, v03.AgentCapabilities))
    for name, scheme in card.security_schemes.items():
        out.security_schemes[name].CopyFrom(_same_wire(scheme, v03.SecurityScheme))
    return out


# ---- the RPCs ---------------------------------------------------------------------------


def _same(message: M) -> M:
    return message


def _card_request(request: object) -> pb.GetExtendedAgentCardRequest:
    return pb.GetExtendedAgentCardRequest()


# v0.3 RPC -> (the 1.0 RPC / A2AApi method that serves it, its request in, its answer out:
# the answer, or each event of a stream). GetAgentCard is served by GetExtendedAgentCard,
# or by the public card when no extended one is configured (the binding's choice).
ROUTES: dict[str, tuple[str, Callable[[Any], ProtoMessage], Callable[[Any], ProtoMessage]]] = {
    "SendMessage": ("SendMessage", send_request_in, send_response_out),
    "SendStreamingMessage": ("SendStreamingMessage", send_request_in, stream_out),
    "GetTask": ("GetTask", get_task_in, task_out),
    "CancelTask": ("CancelTask", cancel_task_in, task_out),
    "TaskSubscription": ("SubscribeToTask", subscribe_in, stream_out),
    "CreateTaskPushNotificationConfig": (
        "CreateTaskPushNotificationConfig",
        create_config_in,
        task_config_out,
    ),
    "GetTaskPushNotificationConfig": (
        "GetTaskPushNotificationConfig",
        get_config_in,
        task_config_out,
    ),
    "ListTaskPushNotificationConfig": (
        "ListTaskPushNotificationConfigs",
        list_configs_in,
        list_configs_out,
    ),
    "GetAgentCard": ("GetExtendedAgentCard", _card_request, card_out),
    "DeleteTaskPushNotificationConfig": (
        "DeleteTaskPushNotificationConfig",
        delete_config_in,
        _same,
    ),
}


# ---- errors ---------------------------------------------------------------------------

# The errors a v0.3 client maps back to its exception classes by name (a2a-sdk's v0.3
# transports read "<ErrorName>: <message>" from a gRPC status, `type` from a REST body).
V03_ERROR_NAMES = frozenset(
    {
        "TaskNotFoundError",
        "TaskNotCancelableError",
        "PushNotificationNotSupportedError",
        "UnsupportedOperationError",
        "ContentTypeNotSupportedError",
        "InvalidAgentResponseError",
        "ExtendedAgentCardNotConfiguredError",
        "ExtensionSupportRequiredError",
        "VersionNotSupportedError",
        "InvalidParamsError",
        "InvalidRequestError",
        "MethodNotFoundError",
        "InternalError",
        "JSONParseError",
    }
)


def error_name(err: A2AError) -> str:
    """The error's name in the one table ('' for one a v0.3 client has no class for:
    authentication, drain and overload keep their status code and details)."""
    for cls in type(err).__mro__:
        if cls in ALL_ERRORS:
            return cls.__name__ if cls.__name__ in V03_ERROR_NAMES else ""
    return ""


def error_message(err: A2AError) -> str:
    """`<ErrorName>: <message>`, the form a v0.3 gRPC client parses (else the message)."""
    name = error_name(err)
    return f"{name}: {err.message}" if name else err.message
