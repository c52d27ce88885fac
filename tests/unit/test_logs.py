"""Log records as JSON lines or text (service.ops.logs), redaction, and the access line's
fields (service.calls.access) including the trace and span id of the current span."""

from __future__ import annotations

import io
import json
import logging

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from gen import a2a_pb2 as pb
from service.app import config
from service.calls import access
from service.ops import logs
from service.ops.logs import JsonFormatter, Redactor, TextFormatter


def _record(msg: str, *args, exc: BaseException | None = None, **extra) -> logging.LogRecord:
    exc_info = None
    if exc is not None:
        try:
            raise exc
        except BaseException as raised:  # noqa: BLE001 - to get a traceback
            exc_info = (type(raised), raised, raised.__traceback__)
    record = logging.LogRecord("t", logging.ERROR, __file__, 1, msg, args, exc_info)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def _boom() -> None:
    try:
        {}["missing"]
    except KeyError as inner:
        raise RuntimeError("upstream said no\nsecond line") from inner


def test_a_json_record_is_one_line_with_the_exception_as_a_field():
    try:
        _boom()
    except RuntimeError as exc:
        record = _record("failed %s", "here", exc=exc)
    line = JsonFormatter(Redactor()).format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["level"] == "ERROR" and doc["logger"] == "t" and doc["message"] == "failed here"
    exc_doc = doc["exception"]
    assert exc_doc["type"] == "RuntimeError"
    assert exc_doc["message"] == "upstream said no\nsecond line"
    assert any("in _boom" in frame for frame in exc_doc["stack"])
    assert exc_doc["cause"]["type"] == "KeyError"
    assert "time" in doc


def test_fields_become_top_level_keys_and_empty_ones_are_left_out():
    record = _record("x", fields={"method": "GetTask", "task_id": "", "duration_ms": 1.5})
    doc = json.loads(JsonFormatter(Redactor()).format(record))
    assert doc["method"] == "GetTask" and doc["duration_ms"] == 1.5
    assert "task_id" not in doc


def test_text_has_the_exception_without_source_lines():
    try:
        _boom()
    except RuntimeError as exc:
        record = _record("failed", exc=exc)
    text = TextFormatter(Redactor()).format(record)
    assert text.splitlines()[0].endswith("ERROR t: failed")
    assert "RuntimeError: upstream said no" in text and "caused by KeyError" in text
    assert '{}["missing"]' not in text  # frames only: a source line may hold a literal secret


def test_configured_secrets_and_credentials_are_redacted_everywhere():
    redactor = Redactor()
    redactor.protect(["s3cr3t-token-value-1234"])
    try:
        raise ValueError(
            "failed with s3cr3t-token-value-1234, Bearer abc.def.ghi, password=hunter2!, "
            "api_key: 'k-123', key 0123456789abcdef0123456789abcdef for task "
            "01930c5e-8a1b-7c2d-9e3f-0a1b2c3d4e5f"
        )
    except ValueError as exc:
        record = _record("refused s3cr3t-token-value-1234 (Basic dXNlcjpwYXNz)", exc=exc)
    for formatter in (JsonFormatter(redactor), TextFormatter(redactor)):
        out = formatter.format(record)
        for secret in (
            "s3cr3t-token-value-1234",
            "abc.def.ghi",
            "hunter2",
            "k-123",
            "dXNlcjpwYXNz",
        ):
            assert secret not in out, (secret, out)
        assert "0123456789abcdef0123456789abcdef" not in out  # token-like, in an exception
        assert "01930c5e-8a1b-7c2d-9e3f-0a1b2c3d4e5f" in out  # a UUID (task id) is no secret
        assert "[redacted]" in out


def test_the_settings_name_every_configured_secret(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("ci=token-from-a-file-0123456\n")
    s = config.load(
        env={
            "A2A_AUTH_BEARER_TOKENS": "alice=token-inline-0123456789",
            "A2A_AUTH_BASIC_USERS": "carol:pass word 1",
            "A2A_AUTH_API_KEYS_FILE": str(tokens),
        }
    )
    assert set(config.secrets(s)) >= {
        "token-inline-0123456789",
        "pass word 1",
        "token-from-a-file-0123456",
    }


@pytest.mark.parametrize(("tty", "expected"), [(True, "text"), (False, "json")])
def test_auto_is_text_on_a_terminal_and_json_otherwise(tty, expected):
    class Stream(io.StringIO):
        def isatty(self) -> bool:
            return tty

    assert logs.resolve_format("auto", Stream()) == expected
    assert logs.resolve_format("json", Stream()) == "json"
    assert logs.resolve_format("text", Stream()) == "text"


def test_log_format_is_checked():
    with pytest.raises(config.ConfigError, match="log_format: expected auto, json or text"):
        config.load(env={"A2A_LOG_FORMAT": "xml"})
    assert config.load(env={"A2A_ACCESS_LOG": "false"}).access_log is False


def test_configure_writes_json_lines_to_the_stream():
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    out = io.StringIO()
    try:
        assert logs.configure("INFO", "json", out) == "json"
        logging.getLogger("service.x").info("hello %s", "there")
        logging.getLogger("service.x").debug("not at INFO")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    [line] = out.getvalue().splitlines()
    assert json.loads(line)["message"] == "hello there"


def _access_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("service.access")]


def test_an_access_line_carries_the_call_and_the_current_span(caplog):
    caplog.set_level(logging.INFO, logger="service.access")
    log = access.AccessLog()
    call = log.open("grpc", "SendMessage")
    assert call is not None and access.current() is call
    call.saw(pb.SendMessageRequest(message=pb.Message(message_id="m")))
    call.saw(pb.SendMessageResponse(task=pb.Task(id="t-1")))
    call.principal = "bearer:alice"
    context = SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    with trace.use_span(NonRecordingSpan(context)):
        call.close()
    [record] = _access_lines(caplog)
    fields = record.fields
    assert fields["method"] == "SendMessage" and fields["binding"] == "grpc"
    assert fields["outcome"] == "OK" and fields["task_id"] == "t-1"
    assert fields["principal"] == "bearer:alice" and fields["duration_ms"] >= 0
    assert fields["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert fields["span_id"] == "b7ad6b7169203331"


def test_an_internal_error_gives_its_ref_and_no_span_no_trace_id(caplog):
    from service.protocol.errors import internal_error

    caplog.set_level(logging.INFO, logger="service.access")
    call = access.AccessLog().open("rest", "GetTask")
    assert call is not None
    call.saw(pb.GetTaskRequest(id="t-2"))
    err = internal_error(RuntimeError("x"), "test")
    call.failed(err)
    call.close()
    [record] = _access_lines(caplog)
    assert record.fields["outcome"] == "INTERNAL_ERROR"
    assert record.fields["ref"] == err.metadata["ref"] and record.fields["task_id"] == "t-2"
    assert "trace_id" not in record.fields


def test_no_call_is_made_when_the_access_logger_is_off(caplog):
    caplog.set_level(logging.WARNING, logger="service.access")
    assert access.AccessLog().open("grpc", "GetTask") is None


@pytest.mark.parametrize(
    ("message", "task_id"),
    [
        (pb.GetTaskRequest(id="a"), "a"),
        (pb.CancelTaskRequest(id="b"), "b"),
        (pb.SubscribeToTaskRequest(id="c"), "c"),
        (pb.ListTaskPushNotificationConfigsRequest(task_id="d"), "d"),
        (pb.SendMessageRequest(message=pb.Message(task_id="e")), "e"),
        (pb.StreamResponse(status_update=pb.TaskStatusUpdateEvent(task_id="f")), "f"),
        (pb.StreamResponse(task=pb.Task(id="g")), "g"),
        (pb.ListTasksRequest(), ""),
    ],
)
def test_the_task_id_comes_from_the_request_or_reply(message, task_id):
    assert access.task_id_of(message) == task_id


@pytest.mark.parametrize(
    "created",
    [0.0, 0.0004999, 0.0005, 1.9999996, 1764988396.9995, 1764988396.99949, 1764988397.123456],
)
def test_json_lines_time_is_datetimes_to_the_millisecond(created: float) -> None:
    """The per-second cache writes what datetime writes, rounding at the second's end too."""
    import datetime

    formatter = JsonFormatter()
    formatter._time(created - 1)  # a different second cached before
    expected = datetime.datetime.fromtimestamp(created, datetime.UTC).isoformat(
        timespec="milliseconds"
    )
    assert formatter._time(created) == expected
    assert formatter._time(created) == expected  # from the cache
