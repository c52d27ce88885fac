"""The command line: `python -m service serve | push-dead | card | call`. `--help` explains every flag."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import pathlib
import sys
from typing import Any

from service.app import card_cli, config, config_doc, memory, push_cli, workers
from service.ops import logflood, logs
from service.telemetry import remote

DESCRIPTION = """Run the A2A 1.0 service: gRPC (with health and reflection) and the HTTP gateway.
Every flag can also be set as an environment variable (A2A_ + the flag name in upper
case with underscores, e.g. A2A_GRPC_PORT) or as a key in a TOML file given with --config.
Flags win over the environment, which wins over the file."""

SERVE_EPILOG = """Only the common keys have a flag above. Every key (the flags' too) can be set in the
config file (--config FILE: `grpc_port = 50051`) or in the environment as A2A_<KEY>
(A2A_GRPC_PORT=50051). Every key, its default and meaning: README "Configuration",
or `python -m service config-reference`. An unknown key in the file stops startup with
the nearest known ones; an unknown A2A_* variable is warned about and ignored."""


def add_serve_arguments(serve: argparse.ArgumentParser) -> list[argparse.Action]:
    """The `serve` flags, added to `serve`; the actions argparse made for them."""
    flags: list[argparse.Action] = []

    def add(*names: str, **options: Any) -> None:
        flags.append(serve.add_argument(*names, **options))

    add(
        "--config", metavar="FILE", help="TOML file with settings (keys as below, with underscores)"
    )
    add("--host", help="address to listen on (default 127.0.0.1; 0.0.0.0 for all interfaces)")
    add(
        "--grpc-port",
        type=int,
        help="gRPC port (default 50051; 0 picks a free port; -1 turns gRPC off)",
    )
    add(
        "--http-port",
        type=int,
        help="HTTP gateway port for JSON-RPC, REST and the agent card (default 8080; 0 picks a free port; -1 disables it)",
    )
    add(
        "--data-dir",
        help="directory for the task database and workspaces (default ./data, created on first run)",
    )
    add(
        "--store",
        help="task store URL: sqlite:PATH (default sqlite:DATA_DIR/tasks.db), memory: (not durable),"
        " or postgresql://USER@HOST/DB (shared by several processes)",
    )
    add(
        "--bus",
        help="event bus shared by several processes: redis://HOST:6379/0 (default: in-process)",
    )
    add(
        "--workers",
        type=int,
        help="processes on this host sharing the ports (default 1; >1 needs a postgresql store"
        " and a redis bus)",
    )
    add(
        "--agent",
        help="agent to run: echo (default), command, or an import path package.module:attr",
    )
    add("--command", help='program for the command agent, shell-quoted, e.g. "wc -w"')
    add(
        "--public-url", help="base URL of the HTTP gateway as clients reach it (for the agent card)"
    )
    add(
        "--grpc-public-address",
        help="host:port of the gRPC endpoint as clients reach it (for the agent card)",
    )
    add(
        "--upstream",
        metavar="HOST:PORT",
        help="proxy mode: run only the HTTP gateway, forwarding every call to this A2A gRPC server",
    )
    add(
        "--card-max-age",
        type=int,
        help="seconds clients and caches may reuse the agent card (Cache-Control max-age; default 60)",
    )
    add(
        "--sse-keepalive-seconds",
        type=float,
        help="seconds between keep-alive comments on idle SSE streams (default 15)",
    )
    add("--name", help="agent name shown in the agent card (default: the agent's own)")
    add(
        "--push-notifications",
        choices=("true", "false"),
        help="enable push notification configs (default false)",
    )
    add("--log-level", help="DEBUG, INFO (default), WARNING or ERROR")
    add(
        "--transport",
        dest="stdio",
        type=_transport,
        metavar="stdio",
        help="`--transport stdio`: also serve JSON-RPC on stdin/stdout, one request per line"
        " (answers on stdout, everything else on stderr; end of stdin stops the server)",
    )
    return flags


def _transport(value: str) -> str:
    """`--transport stdio` sets the `stdio` key (the other transports have keys of their own)."""
    if value != "stdio":
        raise argparse.ArgumentTypeError(
            f"{value!r}: only stdio is chosen here (the others are settings: unix_socket, ...)"
        )
    return "true"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m service",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command_name", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the service",
        description=DESCRIPTION,
        epilog=SERVE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_serve_arguments(serve)
    push_cli.add_parser(sub)
    card_cli.add_parser(sub)
    reference = sub.add_parser(
        "config-reference",
        help="print the configuration reference (docs/configuration.md's key tables), from the settings",
    )
    reference.add_argument(
        "--write", metavar="FILE", help="replace the tables between the markers in FILE instead"
    )
    sub.add_parser(  # parsed by call_cli (main hands `call ...` over before this parser runs)
        "call", help="call an A2A agent: the a2a-call client (python -m service call --help)"
    )
    return parser


def setting_flags() -> dict[str, str]:
    """Setting key -> its `serve` flag, for the keys that have one."""
    return {
        action.dest: action.option_strings[0]
        for action in add_serve_arguments(argparse.ArgumentParser(add_help=False))
        if action.option_strings and action.dest in config.FIELDS
    }


def _config_reference(args: argparse.Namespace) -> int:
    flags = setting_flags()
    if args.write:
        changed = config_doc.write(pathlib.Path(args.write), flags)
        print(f"{args.write}: {'updated' if changed else 'already up to date'}")
    else:
        print(config_doc.reference(flags))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["call"]:
        from a2a_call import cli as call_cli

        return call_cli.main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command_name == "push-dead":
        return push_cli.main(args)
    if args.command_name == "card":
        return card_cli.main(args)
    if args.command_name == "config-reference":
        return _config_reference(args)
    flags = {k: v for k, v in vars(args).items() if k not in ("command_name", "config")}
    try:
        settings = config.load(args.config, flags=flags)
    except config.ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    # JSON lines unless on a terminal; a worker of --workers names itself in every record.
    chosen = logs.configure(settings.log_level, settings.log_format, worker=workers.worker_index())
    # The span exporter's child process (service/telemetry/remote.py) logs the same way.
    remote.log_children_with(
        functools.partial(logs.configure, settings.log_level, chosen, None, workers.worker_index())
    )
    logflood.install()  # repeated identical errors are summarised (also without the HTTP gateway)
    if not workers.is_worker():  # the parent of --workers warns once, not each worker again
        for warning in config.unknown_env():
            logging.getLogger("service").warning("%s", warning)
    try:
        workers.check_workers(settings)
    except config.ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    if settings.workers > 1:
        if not workers.is_worker():
            return workers.run_workers(settings, list(sys.argv[1:] if argv is None else argv))
        workers.as_worker(settings)
    from service.app.server import StartupError, serve

    memory.limit_malloc_arenas()  # before the loop's threads: they share two C heap arenas
    try:
        asyncio.run(serve(settings))
    except (StartupError, config.ConfigError) as exc:
        # One line naming the setting; the traceback only for someone debugging.
        logging.getLogger("service").debug("startup failed", exc_info=True)
        print(f"cannot start: {exc}", file=sys.stderr)
        return 2
    return 0
