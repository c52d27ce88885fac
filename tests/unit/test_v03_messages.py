"""The v0.3 fast path (gateway/v03_messages.py) equals the dict path it shortcuts
(v03_shapes + build_request / to_json_dict), member order included."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from google.protobuf import json_format

from gateway import v03_messages as direct
from gateway import v03_shapes as shapes
from gateway.transcode import build_request, to_json_dict
from gen import a2a_pb2 as pb

MESSAGE: dict[str, Any] = {
    "kind": "message",
    "messageId": "m1",
    "role": "user",
    "parts": [{"kind": "text", "text": "hi"}],
}


def _deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"x": 1}
    for _ in range(levels):
        value = {"a": value}
    return value


PLAIN = [
    {"message": MESSAGE},
    {"message": {k: v for k, v in MESSAGE.items() if k != "kind"}},
    {
        "message": {
            **MESSAGE,
            "role": "agent",
            "contextId": "c",
            "taskId": "t",
            "referenceTaskIds": ["a", "b"],
            "extensions": ["urn:x"],
            "metadata": {"k": [1, 2.5, None, True, {"n": "s"}]},
            "parts": [
                {"text": "no kind", "metadata": {"m": 1}},
                {"kind": "data", "data": {"a": [1, {"b": None}]}},
                {"data": {}},
                {"kind": "text", "text": "", "metadata": {}},
            ],
            "unknown": 1,
        },
        "metadata": {},
        "configuration": {
            "acceptedOutputModes": ["text/plain"],
            "historyLength": 3,
            "blocking": False,
        },
        "tenant": "ignored",
    },
    {"message": {**MESSAGE, "contextId": "", "referenceTaskIds": []}, "configuration": {}},
    {"message": MESSAGE, "configuration": {"acceptedOutputModes": []}},
    {"message": MESSAGE, "configuration": {"historyLength": 0, "blocking": True}},
    # json_format's nesting limit, counted from the request in both paths
    {"message": {**MESSAGE, "metadata": _deep(48)}},
    {"message": MESSAGE, "metadata": _deep(48)},
    {"message": {**MESSAGE, "parts": [{"kind": "data", "data": _deep(47)}]}},
]
FALLBACK = [
    {},
    {"message": None},
    {"message": {**MESSAGE, "kind": "task"}},
    {"message": {**MESSAGE, "role": "ROLE_USER"}},
    {"message": {**MESSAGE, "role": ["user"]}},
    {"message": {**MESSAGE, "parts": "x"}},
    {"message": {**MESSAGE, "parts": [{"kind": "image"}]}},
    {"message": {**MESSAGE, "parts": [{"kind": "text", "text": 3}]}},
    {"message": {**MESSAGE, "parts": [{"kind": "file", "file": {"bytes": "aGk=", "name": "f"}}]}},
    {"message": {**MESSAGE, "parts": [{"kind": "file", "file": {"uri": "http://x/y"}}]}},
    {"message": {**MESSAGE, "parts": [{"kind": "text", "text": "x", "metadata": [1]}]}},
    {
        "message": {
            **MESSAGE,
            "parts": [
                {"kind": "data", "data": {"value": [1]}, "metadata": {"data_part_compat": True}}
            ],
        }
    },
    {"message": {**MESSAGE, "messageId": 5}},
    {"message": {**MESSAGE, "referenceTaskIds": "a"}},
    {"message": {**MESSAGE, "extensions": [1]}},
    {"message": {**MESSAGE, "metadata": "x"}},
    {"message": {**MESSAGE, "metadata": _deep(49)}},
    {"message": MESSAGE, "metadata": _deep(49)},
    {"message": {**MESSAGE, "parts": [{"kind": "data", "data": _deep(48)}]}},
    {"message": MESSAGE, "metadata": [1]},
    {"message": MESSAGE, "configuration": []},
    {"message": MESSAGE, "configuration": {"blocking": "no"}},
    {"message": MESSAGE, "configuration": {"historyLength": "4"}},
    {"message": MESSAGE, "configuration": {"historyLength": True}},
    {"message": MESSAGE, "configuration": {"historyLength": 2**31}},
    {"message": MESSAGE, "configuration": {"acceptedOutputModes": "text/plain"}},
    {"message": MESSAGE, "configuration": {"pushNotificationConfig": {"url": "http://x"}}},
]


def _dict_path(params: dict[str, Any]) -> pb.SendMessageRequest:
    built = build_request(pb.SendMessageRequest, body=shapes.send_in(params), body_field="*")
    assert isinstance(built, pb.SendMessageRequest)
    return built


@pytest.mark.parametrize("params", PLAIN)
def test_plain_params_build_the_same_request(params):
    fast = direct.send_request(params)
    assert fast is not None
    expected = _dict_path(params)
    assert fast == expected
    assert fast.SerializeToString(deterministic=True) == expected.SerializeToString(
        deterministic=True
    )
    for field in ("configuration", "metadata"):
        assert fast.HasField(field) == expected.HasField(field)


@pytest.mark.parametrize("params", FALLBACK)
def test_anything_else_takes_the_dict_path(params):
    assert direct.send_request(params) is None
    with contextlib.suppress(Exception):  # what the dict path does is what the caller gets
        _dict_path(params)


def _struct(value: dict[str, Any]) -> Any:
    return json_format.ParseDict(value, pb.Task().metadata)


def _message(**fields: Any) -> pb.Message:
    return pb.Message(message_id="m", role=pb.ROLE_AGENT, parts=[pb.Part(text="t")], **fields)


PARTS = [
    pb.Part(text="x", metadata=_struct({"a": 1})),
    pb.Part(raw=b"\x00\xffhi", media_type="application/octet-stream", filename="f.bin"),
    pb.Part(url="http://x/y"),
    pb.Part(raw=b""),
    pb.Part(data=json_format.ParseDict({"k": [1, 2]}, pb.Part().data)),
    pb.Part(data=json_format.ParseDict([1, "a"], pb.Part().data), metadata=_struct({"m": 2})),
    pb.Part(data=json_format.ParseDict(3.5, pb.Part().data)),
    pb.Part(metadata=_struct({})),
    pb.Part(),
]
FULL_MESSAGE = pb.Message(
    message_id="m",
    context_id="c",
    task_id="t",
    role=pb.ROLE_USER,
    parts=PARTS,
    metadata=_struct({"x": {"y": None}}),
    extensions=["urn:e"],
    reference_task_ids=["r1"],
)
ARTIFACT = pb.Artifact(
    artifact_id="a",
    name="n",
    description="d",
    parts=PARTS,
    metadata=_struct({}),
    extensions=["urn:e"],
)
STATUS = pb.TaskStatus(state=pb.TASK_STATE_INPUT_REQUIRED, message=_message())
STATUS.timestamp.FromJsonString("2026-01-02T03:04:05.123Z")
TASKS = [
    pb.Task(id="t", context_id="c", status=STATUS, artifacts=[ARTIFACT], history=[FULL_MESSAGE]),
    pb.Task(id="t", metadata=_struct({"k": "v"})),
    pb.Task(),
    pb.Task(status=pb.TaskStatus(state=99)),  # type: ignore[arg-type]  # a number of no name
]
RESPONSES = [
    *(pb.SendMessageResponse(task=t) for t in TASKS),
    pb.SendMessageResponse(message=FULL_MESSAGE),
    pb.SendMessageResponse(message=pb.Message(role=7)),  # type: ignore[arg-type]
    pb.StreamResponse(task=TASKS[0]),
    pb.StreamResponse(message=_message()),
    *(
        pb.StreamResponse(
            status_update=pb.TaskStatusUpdateEvent(task_id="t", context_id="c", status=status)
        )
        for status in (STATUS, pb.TaskStatus(state=pb.TASK_STATE_WORKING))
    ),
    pb.StreamResponse(status_update=pb.TaskStatusUpdateEvent(metadata=_struct({"a": 1}))),
    pb.StreamResponse(
        artifact_update=pb.TaskArtifactUpdateEvent(
            task_id="t", context_id="c", artifact=ARTIFACT, append=True, last_chunk=True
        )
    ),
    pb.StreamResponse(artifact_update=pb.TaskArtifactUpdateEvent(metadata=_struct({}))),
]


@pytest.mark.parametrize("response", RESPONSES)
def test_results_render_the_same(response):
    expected = shapes.send_result_out(to_json_dict(response))
    assert json.dumps(direct.send_result(response)) == json.dumps(expected)


@pytest.mark.parametrize("task", TASKS)
def test_tasks_render_the_same(task):
    expected = shapes.task_out(to_json_dict(task))
    assert json.dumps(direct.task_result(task)) == json.dumps(expected)


@pytest.mark.parametrize("response", [pb.SendMessageResponse(), pb.StreamResponse()])
def test_no_payload_is_refused_alike(response):
    with pytest.raises(ValueError):
        direct.send_result(response)
    with pytest.raises(ValueError):
        shapes.send_result_out(to_json_dict(response))
