"""`a2a-call` (also `python -m service call`): call an A2A agent from the command line.

The argument parser and the entry point; the commands themselves are in `run.py`, imported
only when a command runs, so `--help` works without the optional `client` extra (a2a-sdk).
"""

from __future__ import annotations

import argparse
import re
import sys

from a2a_call.errors import stream_table

PROG = "a2a-call"
SUBCOMMANDS = ("send", "card", "get", "list", "cancel", "subscribe", "download", "push")
VALUE_OPTIONS = {
    "--context",
    "--task",
    "--file",
    "--file-url",
    "--data",
    "--bearer",
    "--api-key",
    "--api-key-header",
    "--basic",
    "--cacert",
    "--cert",
    "--key",
    "--verify-card",
    "--timeout",
    "--idle-timeout",
    "--binding",
    "--grpc",
    "--after",
    "--state",
    "--page-size",
    "--page-token",
    "--history-length",
    "--output",
    "-o",
    "--max-download",
    "--push-url",
    "--push-token",
    "--push-auth-scheme",
    "--push-auth-credentials",
    "--config",
}
PUSH_ACTIONS = ("create", "list", "get", "delete")
DEFAULT_MAX_DOWNLOAD = "1G"
DEFAULT_TIMEOUT = 30.0  # as client.DEFAULT_TIMEOUT_SECONDS (kept free of the a2a-sdk)
DEFAULT_IDLE_TIMEOUT = 300.0  # as client.DEFAULT_IDLE_SECONDS
_SIZE = re.compile(r"\s*(\d+)\s*(?:([kmgt])(?:i?b)?|b)?\s*", re.IGNORECASE)
_UNITS = {None: 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

DESCRIPTION = """Call an A2A 1.0 agent: fetch its card (URL/.well-known/agent-card.json, or a full
card URL), pick the first interface it offers that this client speaks (JSON-RPC, HTTP+JSON,
gRPC; --binding chooses), send with A2A-Version: 1.0, stream when the card says so.

  a2a-call URL "text"                        send a message (the default command)
  a2a-call card URL                          show the agent card
  a2a-call get URL --task ID                 show a task
  a2a-call list URL [--context ID]           list tasks
  a2a-call cancel URL --task ID              cancel a task
  a2a-call subscribe URL --task ID [--after SEQ]   follow a task's events
  a2a-call download URL --task ID [NAME|--all]     save stored file artifacts (SHA-256 checked)
  a2a-call push create URL --task ID --push-url HOOK [--push-token T]   push configs of a task
  a2a-call push list|get|delete URL --task ID [--config ID]

Instead of URL, --grpc HOST:PORT talks gRPC to that address without a card."""

EPILOG = """credentials also come from the environment (never echoed): A2A_CALL_BEARER,
A2A_CALL_API_KEY, A2A_CALL_BASIC (USER:PASSWORD), and for push configs A2A_CALL_PUSH_TOKEN,
A2A_CALL_PUSH_CREDENTIALS; prefer them to the flags, which other users of the machine can
see in the process list.

exit codes:
  0  completed (or the command did what it was asked)
  1  the task failed
  2  usage error
  3  the task was canceled or rejected
  4  the task needs input (a permission request nobody answered, or a question)
  5  the task needs authentication (auth-required)
  6  unreachable: no connection, DNS, TLS handshake, timed out (--timeout, --idle-timeout),
     the stream broke off (the server drains, the connection was lost): resume with subscribe
  7  not authenticated or not allowed (HTTP 401/403, gRPC UNAUTHENTICATED/PERMISSION_DENIED)
  8  protocol error: the agent answered with an A2A error, or not with A2A
  9  not verified: --verify-card refused the card, or a download's SHA-256 or size did not
     match
 10  refused as unsafe: credentials would go in plaintext to an interface of a card that
     came over https (see --allow-plaintext-credentials), a download over --max-download,
     or a file:// download

how a stream (send, subscribe; a --no-stream answer alike) ends, on every binding:
""" + stream_table()


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("where and how")
    where.add_argument(
        "--grpc",
        metavar="HOST:PORT",
        help="talk gRPC to this address (no card is fetched; TLS with --cacert/--cert)",
    )
    where.add_argument(
        "--binding",
        metavar="NAME",
        help="jsonrpc, rest or grpc: use the card's interface of this binding",
    )
    where.add_argument(
        "--json", action="store_true", help="print one JSON object per line (ProtoJSON)"
    )
    where.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="give up on any one call (a whole stream or download included) after this long; "
        f"default: {DEFAULT_TIMEOUT:g} s for the card and each unary call, none for a stream "
        "or download as a whole (see --idle-timeout)",
    )
    where.add_argument(
        "--idle-timeout",
        type=float,
        metavar="SECONDS",
        help="give up on a stream, a --no-stream send or a download when no event (or no "
        f"bytes) came for this long (default {DEFAULT_IDLE_TIMEOUT:g} s; 0: wait forever)",
    )
    where.add_argument(
        "--verify-card",
        metavar="JWKS",
        help="a JWK Set (URL or file) the card must be signed with; an unverifiable card is refused",
    )
    auth = common.add_argument_group("credentials and TLS")
    auth.add_argument("--bearer", metavar="TOKEN", help="Authorization: Bearer TOKEN")
    auth.add_argument("--basic", metavar="USER:PASSWORD", help="HTTP Basic credentials")
    auth.add_argument("--api-key", metavar="KEY", help="an API key")
    auth.add_argument(
        "--api-key-header",
        metavar="NAME",
        help="header for --api-key (default: the card's apiKey scheme, else X-API-Key)",
    )
    auth.add_argument(
        "--allow-plaintext-credentials",
        action="store_true",
        help="send credentials even to a plaintext (grpc://, http://) interface of a card "
        "that came over https; without it that is refused (exit 10) unless the interface is "
        "on loopback",
    )
    auth.add_argument("--cacert", metavar="PEM", help="CA certificate(s) to trust")
    auth.add_argument("--cert", metavar="PEM", help="client certificate (mTLS)")
    auth.add_argument("--key", metavar="PEM", help="its private key")
    return common


def byte_size(text: str) -> int:
    """A positive byte count: 1048576, 500K, 100M, 2G (binary units; KiB, MB and the like
    mean the same)."""
    match = _SIZE.fullmatch(text)
    if not match or int(match[1]) == 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a positive size, e.g. 1048576, 500M or 2G")
    return int(match[1]) * _UNITS[match[2] and match[2].lower()]


def _target(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url", nargs="?", help="the agent's base URL or its card URL (not with --grpc)"
    )


def _task(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--task", required=required, metavar="ID", help="the task id")


def build_parser() -> argparse.ArgumentParser:
    return build_parsers()[0]


def build_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The top parser (for --help) and one parser per command."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = _common()

    commands: dict[str, argparse.ArgumentParser] = {}

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        commands[name] = sub.add_parser(
            name,
            parents=[common],
            help=help_text,
            description=help_text,
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        return commands[name]

    send = add("send", "send a message (the default command: a2a-call URL TEXT)")
    _target(send)
    send.add_argument("text", nargs="*", help="the message text (words are joined by spaces)")
    send.add_argument("--context", metavar="ID", help="contextId: continue this conversation")
    _task(send, required=False)
    send.add_argument(
        "--file", action="append", default=[], metavar="PATH", help="add a file part (inline)"
    )
    send.add_argument(
        "--file-url", action="append", default=[], metavar="URL", help="add a file part by URL"
    )
    send.add_argument(
        "--data", action="append", default=[], metavar="JSON", help="add a JSON data part"
    )
    send.add_argument(
        "--no-stream", action="store_true", help="send unary even when the agent can stream"
    )
    decide = send.add_mutually_exclusive_group()
    decide.add_argument(
        "--approve", action="store_true", help="answer permission requests with allow_once"
    )
    decide.add_argument("--deny", action="store_true", help="answer permission requests with deny")
    _push_config(send)

    card = add("card", "show the agent card")
    _target(card)

    get = add("get", "show a task")
    _target(get)
    _task(get)
    get.add_argument("--history-length", type=int, metavar="N", help="at most N history messages")

    listing = add("list", "list tasks (newest first)")
    _target(listing)
    listing.add_argument("--context", metavar="ID", help="only tasks of this context")
    listing.add_argument(
        "--state", metavar="STATE", help="only tasks in this state (e.g. completed, input-required)"
    )
    listing.add_argument("--page-size", type=int, metavar="N")
    listing.add_argument("--page-token", metavar="TOKEN")

    cancel = add("cancel", "cancel a task")
    _target(cancel)
    _task(cancel)

    subscribe = add("subscribe", "follow a task's events until it settles")
    _target(subscribe)
    _task(subscribe)
    subscribe.add_argument(
        "--after",
        metavar="SEQ",
        help="resume after event SEQ (the eventId of a --json line): the task as it is now, "
        "then the events after SEQ (HTTP: Last-Event-ID; gRPC: last-event-id metadata)",
    )

    download = add("download", "save a task's stored file artifacts, checking their SHA-256")
    _target(download)
    _task(download)
    download.add_argument(
        "name", nargs="?", help="artifact id, filename or SHA-256 (default: the only file)"
    )
    download.add_argument("--all", action="store_true", help="every stored file of the task")
    download.add_argument(
        "-o",
        "--output",
        metavar="PATH",
        help="file (one artifact) or directory (default: .); a PATH ending in / is a "
        "directory, made if missing",
    )
    download.add_argument("--force", action="store_true", help="overwrite existing files")
    download.add_argument(
        "--max-download",
        type=byte_size,
        default=byte_size(DEFAULT_MAX_DOWNLOAD),
        metavar="SIZE",
        help=f"abort a file larger than this (default {DEFAULT_MAX_DOWNLOAD}: 1 GiB); a file "
        "is also aborted past the byteSize it declares. file:// URLs are never read",
    )
    pushing = add("push", "create, list, get or delete a task's push notification configs")
    pushing.add_argument("action", choices=PUSH_ACTIONS)
    _target(pushing)
    _task(pushing, required=False)
    pushing.add_argument("--config", metavar="ID", help="the config id (get, delete; create)")
    _push_config(pushing, auth=True)
    pushing.add_argument("--page-size", type=int, metavar="N", help="list: at most N configs")
    pushing.add_argument("--page-token", metavar="TOKEN", help="list: the next page")
    return parser, commands


def _push_config(parser: argparse.ArgumentParser, auth: bool = False) -> None:
    """The flags of a push config: `send` carries one, `push create` makes one."""
    group = parser.add_argument_group("push notifications")
    group.add_argument(
        "--push-url", metavar="URL", help="the receiver the agent POSTs the task's events to"
    )
    group.add_argument(
        "--push-token",
        metavar="TOKEN",
        help="a token the agent sends with each notification (or A2A_CALL_PUSH_TOKEN)",
    )
    if auth:
        group.add_argument(
            "--push-auth-scheme",
            metavar="SCHEME",
            help="how the agent authenticates to the receiver, e.g. Bearer or Basic",
        )
        group.add_argument(
            "--push-auth-credentials",
            metavar="CREDENTIALS",
            help="its credentials for that scheme (or A2A_CALL_PUSH_CREDENTIALS)",
        )


def normalize(argv: list[str]) -> list[str]:
    """Put the command first, and make `send` the default: `a2a-call [options] URL TEXT`."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            break
        if token.startswith("-"):
            i += 2 if token in VALUE_OPTIONS else 1
            continue
        if token in SUBCOMMANDS:
            rest = [*argv[:i], *argv[i + 1 :]]
            return [token, *(_action_first(rest) if token == "push" else rest)]
        break
    if any(t in ("-h", "--help") for t in argv) and i >= len(argv):
        return argv
    return ["send", *argv]


def _action_first(argv: list[str]) -> list[str]:
    """`push URL create` as `push create URL`: the action word first, wherever it was."""
    i = 0
    while i < len(argv):
        token = argv[i]
        if token == "--":
            break
        if token.startswith("-"):
            i += 2 if token in VALUE_OPTIONS else 1
            continue
        if token in PUSH_ACTIONS:
            return [token, *argv[:i], *argv[i + 1 :]]
        i += 1
    return argv


def main(argv: list[str] | None = None) -> int:
    parser, commands = build_parsers()
    words = normalize(list(sys.argv[1:] if argv is None else argv))
    if words and words[0] in commands:
        # Options and words in any order (`URL --task ID TEXT`): intermixed parsing, which
        # argparse offers per parser only, not across subparsers.
        args = commands[words[0]].parse_intermixed_args(words[1:])
        args.command = words[0]
    else:
        args = parser.parse_args(words)  # --help
    try:
        from a2a_call import run as call_run
    except ImportError as exc:  # the optional `client` extra is not installed
        print(
            f"{PROG}: the a2a-sdk client is not installed ({exc.name}); install the package "
            "with its client extra: pip install 'a2a-grpc-service[client]'",
            file=sys.stderr,
        )
        return 2
    return call_run.run(args)


def entry() -> None:
    """The console script."""
    sys.exit(main())
