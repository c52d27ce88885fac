"""The commands of `a2a-call`: send (with the permission round trip), card, get, list, cancel,
subscribe and download (push is in `push.py`), each ending in one of the exit codes of `errors.Exit`."""

from __future__ import annotations

import argparse
import asyncio
import json
import mimetypes
import os
import pathlib
import sys
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from typing import Any

from a2a.types import a2a_pb2 as sdk
from google.protobuf import json_format

from a2a_call import download as call_download
from a2a_call import permission as call_permission
from a2a_call import push as call_push
from a2a_call.client import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_TIMEOUT_SECONDS,
    Connection,
    Credentials,
    Tls,
    binding_of,
    bounded,
    connect,
)
from a2a_call.errors import CallError, Exit, classify
from a2a_call.render import EXIT_OF_STATE, Printer, message_text, state_name
from a2a_call.safe import printable
from a2a_wire.event_ids import take_event_id

INTERRUPTED = (sdk.TASK_STATE_INPUT_REQUIRED, sdk.TASK_STATE_AUTH_REQUIRED)
TERMINAL = (
    sdk.TASK_STATE_COMPLETED,
    sdk.TASK_STATE_FAILED,
    sdk.TASK_STATE_CANCELED,
    sdk.TASK_STATE_REJECTED,
)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a tool its reader left
MAX_FILE_BYTES = 16 * 1024 * 1024  # an inline --file part (larger: serve it and use --file-url)


def run(args: argparse.Namespace) -> int:
    printer = Printer(as_json=args.json)
    try:
        return int(asyncio.run(_command(args, printer)))
    except CallError as exc:
        printer.done()
        print(f"a2a-call: {exc.message}", file=sys.stderr)
        return int(exc.code)
    except KeyboardInterrupt:
        printer.done()
        return 130
    except BrokenPipeError:  # the reader went away (`| head -1`): stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


async def _command(args: argparse.Namespace, printer: Printer) -> Exit:
    if args.grpc and args.url and args.command == "send":
        args.text, args.url = [args.url, *args.text], None  # no URL with --grpc: all is text
    if args.grpc and args.url:
        raise CallError(Exit.USAGE, "give the agent's URL or --grpc HOST:PORT, not both")
    if not args.grpc and not args.url:
        raise CallError(Exit.USAGE, "give the agent's URL (or --grpc HOST:PORT)")
    if args.timeout is not None and args.timeout <= 0:
        raise CallError(Exit.USAGE, "--timeout must be a positive number of seconds")
    if args.idle_timeout is not None and args.idle_timeout < 0:
        raise CallError(Exit.USAGE, "--idle-timeout must be a number of seconds (0: no bound)")
    idle = DEFAULT_IDLE_SECONDS if args.idle_timeout is None else args.idle_timeout or None
    streaming = not getattr(args, "no_stream", False)
    credentials = Credentials.from_args(args.bearer, args.api_key, args.basic, args.api_key_header)
    if args.command == "card" and not args.grpc:
        credentials = Credentials()  # it shows the fetched card: no call carries credentials
    try:
        conn = await bounded(
            args.timeout or DEFAULT_TIMEOUT_SECONDS,
            connect(
                args.url,
                grpc_address=args.grpc,
                binding=binding_of(args.binding),
                credentials=credentials,
                tls=Tls(args.cacert or "", args.cert or "", args.key or ""),
                verify_jwks=args.verify_card,
                streaming=streaming,
                call_timeout=args.timeout,
                idle_timeout=idle,
                allow_plaintext_credentials=args.allow_plaintext_credentials,
            ),
        )
    except CallError:
        raise
    except Exception as exc:
        raise classify(exc) from None
    async with conn:
        try:
            handler = COMMANDS[args.command]
            return await handler(conn, args, printer)
        except (CallError, BrokenPipeError):
            raise
        except Exception as exc:
            raise classify(exc) from None
        finally:
            printer.done()


async def _events(
    stream: AsyncIterator[sdk.StreamResponse], idle: float | None
) -> AsyncIterator[sdk.StreamResponse]:
    """The stream's events, given up (exit 6) when none comes for IDLE seconds: a stream may
    rightly be quiet while the agent works, so it has no bound as a whole, but one that
    trickles or says nothing must not hold the run forever. Keep-alive comments are no event."""
    events = aiter(stream)
    while True:
        window = asyncio.timeout(idle)
        try:
            async with window:
                event = await anext(events)
        except StopAsyncIteration:
            return
        except TimeoutError:
            if not window.expired():
                raise
            raise CallError(
                Exit.UNREACHABLE, f"no event for {idle:g} s (--idle-timeout): gave up"
            ) from None
        yield event


# ----------------------------------------------------------------------------- send


def _parts(args: argparse.Namespace) -> list[sdk.Part]:
    parts: list[sdk.Part] = []
    text = " ".join(args.text)
    if text:
        parts.append(sdk.Part(text=text))
    for path in args.file:
        try:
            size = os.path.getsize(path)
            if size > MAX_FILE_BYTES:
                raise CallError(
                    Exit.USAGE, f"--file {path}: larger than 16 MiB (serve it and use --file-url)"
                )
            data = pathlib.Path(path).read_bytes()
        except OSError as exc:
            raise CallError(Exit.USAGE, f"--file {path}: {exc.strerror}") from None
        name = os.path.basename(path)
        parts.append(
            sdk.Part(
                raw=data,
                filename=name,
                media_type=mimetypes.guess_type(name)[0] or "application/octet-stream",
            )
        )
    for url in args.file_url:
        name = os.path.basename(urllib.parse.urlsplit(url).path)
        part = sdk.Part(url=url, filename=name)
        if guessed := mimetypes.guess_type(name)[0]:
            part.media_type = guessed
        parts.append(part)
    for raw in args.data:
        try:
            value = json.loads(raw)
        except ValueError as exc:
            raise CallError(Exit.USAGE, f"--data is not JSON: {exc}") from None
        part = sdk.Part(media_type="application/json")
        json_format.ParseDict(value, part.data)
        parts.append(part)
    return parts


class Outcome:
    """What one stream (or unary answer) left us with."""

    def __init__(self) -> None:
        self.state: int = sdk.TASK_STATE_UNSPECIFIED
        self.task_id = ""
        self.context_id = ""
        self.envelope: dict[str, Any] | None = None
        self.status_text = ""
        self.replied = False  # a direct Message, no task
        self.last_event_id: str | None = None  # the number of the last event seen

    def see(self, event: sdk.StreamResponse) -> None:
        kind = event.WhichOneof("payload")
        if kind == "message":
            self.replied = True
            self.context_id = event.message.context_id or self.context_id
            return
        if kind == "task":
            self.task_id, self.context_id = event.task.id, event.task.context_id
            self._status(event.task.status, event)
        elif kind == "status_update":
            self.task_id = event.status_update.task_id or self.task_id
            self.context_id = event.status_update.context_id or self.context_id
            self._status(event.status_update.status, event)

    def _status(self, status: sdk.TaskStatus, event: sdk.StreamResponse) -> None:
        self.state = status.state
        self.status_text = message_text(status.message)
        self.envelope = (
            call_permission.find_envelope(event)
            if status.state == sdk.TASK_STATE_INPUT_REQUIRED
            else None
        )


async def _follow(
    conn: Connection,
    stream: AsyncIterator[sdk.StreamResponse],
    printer: Printer,
    outcome: Outcome,
) -> None:
    conn.event_ids.reset()
    grpc_ids = conn.binding == "GRPC"  # in the event itself; on HTTP, the SSE id

    async def drain() -> None:
        async for event in _events(stream, conn.idle_timeout):
            event_id = take_event_id(event) if grpc_ids else conn.event_ids.take()
            outcome.see(event)
            outcome.last_event_id = event_id or outcome.last_event_id
            printer.event(event, event_id)

    try:
        await bounded(conn.timeout, drain())  # None by default: bounded between events
    except (CallError, BrokenPipeError):
        _resume_hint(outcome, printer)
        raise
    except Exception as exc:
        _resume_hint(outcome, printer)
        raise classify(exc, conn.event_ids.error) from None


def _resume_hint(outcome: Outcome, printer: Printer) -> None:
    """A stream that broke off: say how to pick it up where it ended."""
    if outcome.task_id and outcome.state not in TERMINAL:
        after = f" --after {outcome.last_event_id}" if outcome.last_event_id else ""
        printer.note(f"a2a-call: resume with: a2a-call subscribe … --task {outcome.task_id}{after}")


async def _send_once(
    conn: Connection,
    message: sdk.Message,
    printer: Printer,
    outcome: Outcome,
    push: sdk.TaskPushNotificationConfig | None = None,
) -> None:
    request = sdk.SendMessageRequest(message=message)
    if push is not None:
        request.configuration.task_push_notification_config.CopyFrom(push)
    stream = conn.client.send_message(request, context=conn.call_context())
    await _follow(conn, stream, printer, outcome)


def _decision(args: argparse.Namespace, envelope: dict[str, Any], printer: Printer) -> str | None:
    if args.approve:
        return call_permission.ALLOW
    if args.deny:
        return call_permission.DENY
    if sys.stdin.isatty():
        printer.done()
        return call_permission.prompt(envelope, sys.stdin.readline, printer.err)
    return None


async def _pending_envelope(conn: Connection, task_id: str) -> dict[str, Any]:
    task = await bounded(
        conn.call_timeout,
        conn.client.get_task(sdk.GetTaskRequest(id=task_id), context=conn.call_context()),
    )
    envelope = call_permission.find_envelope(task)
    if task.status.state != sdk.TASK_STATE_INPUT_REQUIRED or envelope is None:
        raise CallError(
            Exit.USAGE,
            f"task {task_id} is {state_name(task.status.state)} with no pending permission "
            "request to --approve or --deny",
        )
    return envelope


async def send(conn: Connection, args: argparse.Namespace, printer: Printer) -> Exit:
    parts = _parts(args)
    outcome = Outcome()
    if not parts:
        if not (args.task and (args.approve or args.deny)):
            raise CallError(Exit.USAGE, "nothing to send: give TEXT, --file, --file-url or --data")
        # Answer a permission request left pending by an earlier (non-interactive) run.
        outcome.envelope = await _pending_envelope(conn, args.task)
        outcome.state = sdk.TASK_STATE_INPUT_REQUIRED
        outcome.task_id = args.task
        outcome.context_id = args.context or ""
    else:
        message = sdk.Message(message_id=str(uuid.uuid4()), role=sdk.ROLE_USER)
        message.parts.extend(parts)
        if args.task:
            message.task_id = args.task
        if args.context:
            message.context_id = args.context
        push = call_push.config_of(args) if args.push_url else None
        await _send_once(conn, message, printer, outcome, push)
    while outcome.envelope is not None and outcome.state == sdk.TASK_STATE_INPUT_REQUIRED:
        envelope = outcome.envelope
        decision = _decision(args, envelope, printer)
        if decision is None:
            if not printer.as_json:
                for line in call_permission.describe(envelope):
                    printer.say(line)
                printer.say("envelope: " + json.dumps(envelope, sort_keys=True))
            printer.note(
                f"a2a-call: task {outcome.task_id} waits for a permission decision; answer with "
                f"--task {outcome.task_id} --approve (or --deny)"
            )
            return Exit.INPUT_REQUIRED
        if not printer.as_json:
            printer.say(f"decision: {decision}")
        answer = call_permission.answer(envelope, decision, outcome.context_id)
        outcome.envelope = None
        await _send_once(conn, answer, printer, outcome)
    return _finish(outcome, printer, conn)


def _finish(outcome: Outcome, printer: Printer, conn: Connection) -> Exit:
    if outcome.replied and not outcome.task_id:
        return Exit.COMPLETED
    state = outcome.state
    if state not in EXIT_OF_STATE:  # the connection lost, as errors.STREAM_ENDINGS says
        raise CallError(
            Exit.UNREACHABLE,
            f"interrupted: the answer ended while task {outcome.task_id or '?'} was "
            f"{state_name(state)}; follow it with: a2a-call subscribe … --task {outcome.task_id}",
        )
    if not printer.as_json:
        printer.done()
        detail = f": {printable(outcome.status_text)}" if outcome.status_text else ""
        printer.say(f"task {printable(outcome.task_id)} {state_name(state)}{detail}")
        if state in INTERRUPTED:
            printer.note(
                f"continue with: a2a-call … --task {outcome.task_id} --context "
                f"{outcome.context_id} TEXT"
            )
    return EXIT_OF_STATE[state]


# ----------------------------------------------------------------------------- the others


async def card(conn: Connection, args: argparse.Namespace, printer: Printer) -> Exit:
    if conn.card_json is None:  # --grpc: ask the server for its card
        got = await bounded(
            conn.call_timeout,
            conn.client.get_extended_agent_card(
                sdk.GetExtendedAgentCardRequest(), context=conn.call_context()
            ),
        )
        printer.card(got, None)
    else:
        printer.card(conn.card, conn.card_json)
    return Exit.COMPLETED


async def get(conn: Connection, args: argparse.Namespace, printer: Printer) -> Exit:
    request = sdk.GetTaskRequest(id=args.task)
    if args.history_length is not None:
        request.history_length = args.history_length
    task = await bounded(
        conn.call_timeout, conn.client.get_task(request, context=conn.call_context())
    )
    printer.task(task)
    return Exit.COMPLETED


def _state_value(name: str) -> int:
    key = "TASK_STATE_" + name.upper().replace("-", "_")
    try:
        return int(sdk.TaskState.Value(key))
    except ValueError:
        raise CallError(Exit.USAGE, f"--state {name!r}: not a task state") from None


async def list_tasks(conn: Connection, args: argparse.Namespace, printer: Printer) -> Exit:
    request = sdk.ListTasksRequest()
    if args.context:
        request.context_id = args.context
    if args.state:
        request.status = _state_value(args.state)  # type: ignore[assignment]
    if args.page_size is not None:
        request.page_size = args.page_size
    if args.page_token:
        request.page_token = args.page_token
    page = await bounded(
        conn.call_timeout, conn.client.list_tasks(request, context=conn.call_context())
    )
    printer.tasks(page)
    return Exit.COMPLETED


async def cancel(conn: Connection, args: argparse.Namespace, printer: Printer) -> Exit:
    task = await bounded(
        conn.call_timeout,
        conn.client.cancel_task(sdk.CancelTaskRequest(id=args.task), context=conn.call_context()),
    )
    printer.task(task)
    return Exit.COMPLETED


async def subscribe(conn: Connection, args: argparse.Namespace, printer: Printer) -> Exit:
    extra: dict[str, str] = {}
    if args.after is not None:
        if not args.after.strip() or not args.after.isprintable():
            raise CallError(Exit.USAGE, "--after takes an event id (the eventId of a line)")
        # HTTP: the Last-Event-ID header; gRPC: the last-event-id metadata (lower-cased)
        extra["Last-Event-ID"] = args.after.strip()
    outcome = Outcome()
    stream = conn.client.subscribe(
        sdk.SubscribeToTaskRequest(id=args.task), context=conn.call_context(extra)
    )
    await _follow(conn, stream, printer, outcome)
    if not outcome.task_id:
        outcome.task_id = args.task
    return _finish(outcome, printer, conn)


async def download(conn: Connection, args: argparse.Namespace, printer: Printer) -> Exit:
    task = await bounded(
        conn.call_timeout,
        conn.client.get_task(sdk.GetTaskRequest(id=args.task), context=conn.call_context()),
    )
    files = call_download.select(call_download.stored_files(task), args.name, args.all)
    for file in files:
        dest = call_download.target_path(args.output, file, len(files) > 1)
        size = await bounded(
            conn.timeout,  # None by default: the body is bounded between chunks (idle)
            call_download.fetch(conn, file, dest, force=args.force, limit=args.max_download),
        )
        if printer.as_json:
            print(
                json.dumps(
                    {
                        "artifactId": file.artifact_id,
                        "filename": file.filename,
                        "path": str(dest),
                        "byteSize": size,
                        "sha256": file.sha256,
                    }
                ),
                file=printer.out,
                flush=True,
            )
        else:
            printer.say(f"{dest}: {size} bytes, SHA-256 {file.sha256} verified")
    return Exit.COMPLETED


COMMANDS = {
    "send": send,
    "card": card,
    "get": get,
    "list": list_tasks,
    "cancel": cancel,
    "subscribe": subscribe,
    "download": download,
    "push": call_push.push,
}
