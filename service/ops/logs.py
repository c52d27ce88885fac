"""How log records are written: JSON lines for machines, readable text for people, and no
secrets either way.

`log_format = "auto"` (the default) writes JSON lines when stderr is not a terminal (a
container, systemd, a file) and text on a terminal; `"json"` and `"text"` choose. A JSON
record is one line whatever it carries: an exception becomes the `exception` field
(type, message and the stack as `file:line in function` frames, no source lines), so a
multi-line traceback never splits a record. Every record names its process: `pid`, and
under `serve --workers N` the `worker` index (text: `[worker 1 pid 4242]` before the
level), so the lines of two workers sharing one stream can be told apart. Fields a caller passes with
`extra={"fields": {...}}` (the access log's method, outcome, ids) become top-level keys;
they are written as given, so only values chosen by our code go there, never text a
caller or a library wrote.

Redaction (`Redactor`, applied to every record by both formats): the configured
credentials (`protect`), a credential after an `Authorization` scheme word (`Bearer …`,
`Basic …`: 8 or more token characters, so prose like "basic users" stays), and in
exception messages — which agents and libraries write without
thinking of logs — also token-like runs (24+ letters/digits, not a UUID) and `secret=…`
style pairs become `[redacted]`.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import sys
import threading
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO

from service.setting import check_section, one_of, setting

FORMATS = ("auto", "json", "text")
FIELDS = "fields"  # the `extra` key whose dict becomes top-level JSON keys
REDACTED = "[redacted]"
TEXT_FORMAT = "%(asctime)s [{where}] %(levelname)s %(name)s: %(message)s"

_SCHEME = re.compile(r"(?i)\b(bearer|basic)(\s+)(?!realm\b)[A-Za-z0-9._~+/=:-]{8,}")
_PAIR = re.compile(
    r"(?i)\b([\w-]*(?:password|passwd|secret|token|credential|api[_-]?key|authorization)[\w-]*)"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|[^\s,;)]+)"
)
_TOKEN = re.compile(r"[A-Za-z0-9_+/=-]{24,}")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


class Redactor:
    """Scrubs secrets from text before it is logged (see the module docstring)."""

    def __init__(self) -> None:
        self._secrets: frozenset[str] = frozenset()
        self._lock = threading.Lock()

    def protect(self, secrets: Iterable[str]) -> None:
        """Add configured secrets (tokens, passwords, keys): never written, wherever they occur."""
        with self._lock:
            self._secrets = self._secrets | {s for s in secrets if len(s) >= 4}

    def text(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return _SCHEME.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)

    def untrusted(self, text: str) -> str:
        """Text written by code that did not mean it for a log (exception messages)."""
        text = _PAIR.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", self.text(text))
        return _TOKEN.sub(lambda m: m.group(0) if _UUID.fullmatch(m.group(0)) else REDACTED, text)


REDACTOR = Redactor()


def protect(secrets: Iterable[str]) -> None:
    """Never log these strings (the composition root passes every configured credential)."""
    REDACTOR.protect(secrets)


ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]


def exception_fields(exc_info: ExcInfo, redactor: Redactor = REDACTOR) -> dict[str, Any]:
    """An exception as data: its type, its redacted message, the frames (no source lines), and
    the same for its cause or context."""
    _, exc, tb = exc_info
    out: dict[str, Any] = {
        "type": type(exc).__qualname__,
        "message": redactor.untrusted(str(exc)),
        "stack": [
            f"{frame.filename}:{frame.lineno} in {frame.name}" for frame in traceback.extract_tb(tb)
        ],
    }
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    if cause is not None:
        out["cause"] = exception_fields((type(cause), cause, cause.__traceback__), redactor)
    return out


def _exception_text(fields: dict[str, Any]) -> str:
    lines = [f"{fields['type']}: {fields['message']}"]
    lines += [f"  at {frame}" for frame in fields["stack"]]
    if "cause" in fields:
        lines.append("caused by " + _exception_text(fields["cause"]))
    return "\n".join(lines)


def _worker_value(worker: str | None) -> int | str | None:
    """The worker index as the JSON field holds it (a number; None outside --workers)."""
    if not worker:
        return None
    return int(worker) if worker.isdigit() else worker


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, pid (and worker), the record's
    fields, exception."""

    def __init__(self, redactor: Redactor = REDACTOR, worker: str | None = None) -> None:
        super().__init__()
        self.redactor = redactor
        self.worker = _worker_value(worker)
        # json.dumps with these options builds an encoder per call; an access line per request
        self._encode = json.JSONEncoder(ensure_ascii=False, default=str).encode
        self._second: tuple[int, str] = (-1, "")  # the last second written, and its text

    def _time(self, created: float) -> str:
        """`datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")`, the date
        and time of day made once per second."""
        second = int(created)
        micros = round((created - second) * 1_000_000)
        if micros >= 1_000_000:  # datetime rounds up into the next second
            second, micros = second + 1, 0
        cached, text = self._second
        if cached != second:
            text = datetime.datetime.fromtimestamp(second, datetime.UTC).isoformat()
            self._second = (second, text)
        return f"{text[:19]}.{micros // 1000:03d}+00:00"

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": self._time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": self.redactor.text(record.getMessage()),
            "pid": record.process,
        }
        if self.worker is not None:
            doc["worker"] = self.worker
        fields = getattr(record, FIELDS, None)
        if isinstance(fields, dict):  # values the code chose (ids, names, numbers): as they are
            for key, value in fields.items():
                if key not in doc and value not in (None, ""):
                    doc[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            doc["exception"] = exception_fields(record.exc_info, self.redactor)
        elif record.exc_text:
            doc["exception"] = {"message": self.redactor.untrusted(record.exc_text)}
        if record.stack_info:
            doc["stack"] = record.stack_info
        return self._encode(doc)


class TextFormatter(logging.Formatter):
    """`time [pid P] LEVEL logger: message` (`[worker I pid P]` in a worker), then a
    redacted exception (type, message, frames)."""

    def __init__(self, redactor: Redactor = REDACTOR, worker: str | None = None) -> None:
        where = f"worker {worker} pid %(process)d" if worker else "pid %(process)d"
        super().__init__(TEXT_FORMAT.replace("{where}", where))
        self.redactor = redactor

    def format(self, record: logging.LogRecord) -> str:
        record.message = self.redactor.text(record.getMessage())
        record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        if record.exc_info and record.exc_info[1] is not None:
            fields = exception_fields(record.exc_info, self.redactor)
            text += "\n" + _exception_text(fields)
        return text


def resolve_format(log_format: str, stream: TextIO | None = None) -> str:
    """`json` or `text`: `auto` is text on a terminal, JSON otherwise."""
    if log_format != "auto":
        return log_format
    stream = stream if stream is not None else sys.stderr
    try:
        return "text" if stream.isatty() else "json"
    except (AttributeError, ValueError):  # a closed or odd stream
        return "json"


def configure(
    level: str, log_format: str = "auto", stream: TextIO | None = None, worker: str | None = None
) -> str:
    """The root logger writes to stderr (or `stream`) at `level` in the chosen format, each
    record naming its pid and `worker` (the index under --workers); returns the format in
    force."""
    chosen = resolve_format(log_format, stream)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    formatter: logging.Formatter = (
        JsonFormatter(worker=worker) if chosen == "json" else TextFormatter(worker=worker)
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return chosen


def announce(message: str, fields: dict[str, Any], stream: TextIO | None = None) -> None:
    """Write `message` to stdout (or `stream`) for whoever waits for it (a supervisor, a test
    reading the process's stdout): with the log in JSON, as a JSON record of logger
    `service` (the message field holds `message`, `fields` are its keys, pid and worker as
    in every record); in text, the message alone, as it always was. One write: workers
    share the pipe."""
    formatter = next(
        (
            h.formatter
            for h in logging.getLogger().handlers
            if isinstance(h.formatter, JsonFormatter)
        ),
        None,
    )
    line = message
    if formatter is not None:
        record = logging.LogRecord("service", logging.INFO, __file__, 0, message, None, None)
        record.fields = fields
        line = formatter.format(record)
    out = stream if stream is not None else sys.stdout
    out.write(line + "\n")
    out.flush()


@dataclass
class LogSettings:
    """Log format and the access log ([Operations: logs](operations.md#logs))."""

    log_format: str = setting(
        "auto",
        "`json` (one JSON object per line), `text`, or `auto`: text when stderr is "
        "a terminal, JSON otherwise",
        check=one_of(FORMATS, "auto, json or text"),
    )
    access_log: bool = setting(
        True,
        "one INFO line per A2A call on every binding (logger `service.access`): "
        "method, binding, outcome, duration, task, principal, trace ids, error ref",
    )


def validate_logs(s: LogSettings) -> None:
    check_section(s, LogSettings)
