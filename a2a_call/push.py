"""`a2a-call push create|list|get|delete` and the push config `send --push-url` carries: the
A2A 1.0 TaskPushNotificationConfig (receiver URL, token, authentication scheme and
credentials) through the a2a-sdk client, so on whichever binding the card offers.

The token and the credentials are secrets the agent presents to the receiver: they come from
the flags or, better (the process list shows flags), from A2A_CALL_PUSH_TOKEN and
A2A_CALL_PUSH_CREDENTIALS, and the human output says only whether they are set.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.parse

from a2a.types import a2a_pb2 as sdk

from a2a_call.client import Connection, bounded
from a2a_call.errors import CallError, Exit, classify
from a2a_call.render import Printer
from a2a_call.safe import printable, redact_url

ENV_PUSH_TOKEN = "A2A_CALL_PUSH_TOKEN"
ENV_PUSH_CREDENTIALS = "A2A_CALL_PUSH_CREDENTIALS"


def config_of(args: argparse.Namespace) -> sdk.TaskPushNotificationConfig:
    """The config the flags describe (create, and send --push-url)."""
    url = args.push_url or ""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        raise CallError(Exit.USAGE, f"--push-url {url!r}: the receiver's http(s) URL")
    config = sdk.TaskPushNotificationConfig(url=url)
    if getattr(args, "task", None):
        config.task_id = args.task
    if getattr(args, "config", None):
        config.id = args.config
    token = args.push_token or os.environ.get(ENV_PUSH_TOKEN, "")
    if token:
        config.token = token
    scheme = getattr(args, "push_auth_scheme", None)
    credentials = getattr(args, "push_auth_credentials", None) or (
        os.environ.get(ENV_PUSH_CREDENTIALS, "") if scheme else ""
    )
    if credentials and not scheme:
        raise CallError(Exit.USAGE, "--push-auth-credentials needs --push-auth-scheme")
    if scheme:
        config.authentication.scheme = scheme
        if credentials:
            config.authentication.credentials = credentials
    return config


def _describe(config: sdk.TaskPushNotificationConfig) -> str:
    auth = config.authentication.scheme if config.HasField("authentication") else ""
    return (
        f"config {printable(config.id or '-')}  task {printable(config.task_id)}  "
        f"url {printable(redact_url(config.url))}  token {'set' if config.token else 'none'}"
        + (f"  auth {printable(auth)}" if auth else "")
    )


def _needs(args: argparse.Namespace, *flags: str) -> None:
    missing = [flag for flag in flags if not getattr(args, flag.lstrip("-").replace("-", "_"))]
    if missing:
        raise CallError(Exit.USAGE, f"push {args.action} needs {' and '.join(missing)}")


async def push(conn: Connection, args: argparse.Namespace, printer: Printer) -> Exit:
    """One push config call; its answer in the run's output style."""
    context = conn.call_context()
    client = conn.client
    try:
        if args.action == "create":
            _needs(args, "--task", "--push-url")
            made = await bounded(
                conn.call_timeout,
                client.create_task_push_notification_config(config_of(args), context=context),
            )
            _show(printer, made, "created ")
        elif args.action == "get":
            _needs(args, "--task", "--config")
            request = sdk.GetTaskPushNotificationConfigRequest(task_id=args.task, id=args.config)
            got = await bounded(
                conn.call_timeout,
                client.get_task_push_notification_config(request, context=context),
            )
            _show(printer, got, "")
        elif args.action == "list":
            _needs(args, "--task")
            listing = sdk.ListTaskPushNotificationConfigsRequest(task_id=args.task)
            if args.page_size is not None:
                listing.page_size = args.page_size
            if args.page_token:
                listing.page_token = args.page_token
            page = await bounded(
                conn.call_timeout,
                client.list_task_push_notification_configs(listing, context=context),
            )
            if printer.as_json:
                printer.json_line(page)
            else:
                for config in page.configs:
                    printer.say(_describe(config))
                token = printable(page.next_page_token)
                more = f"; next page: --page-token {token}" if token else ""
                printer.note(f"{len(page.configs)} push configs of task {args.task}{more}")
        else:  # delete
            _needs(args, "--task", "--config")
            gone = sdk.DeleteTaskPushNotificationConfigRequest(task_id=args.task, id=args.config)
            await bounded(
                conn.call_timeout,
                client.delete_task_push_notification_config(gone, context=context),
            )
            if printer.as_json:
                line = {"taskId": args.task, "id": args.config, "deleted": True}
                print(json.dumps(line), file=printer.out, flush=True)
            else:
                printer.say(f"deleted config {printable(args.config)} of task {args.task}")
    except CallError:
        raise
    except Exception as exc:
        raise classify(exc) from None
    return Exit.COMPLETED


def _show(printer: Printer, config: sdk.TaskPushNotificationConfig, verb: str) -> None:
    if printer.as_json:
        printer.json_line(config)
    else:
        printer.say(verb + _describe(config))
