"""`python -m service push-dead list|replay`: the dead-letter store of push deliveries.

Works with the server running or stopped: with `local-file`, replayed jobs go to
DATA_DIR/push-queue/incoming/, which the running server takes in within a
second (or the next server at startup); with `redis-streams` they go straight
back to the stream.

`list` prints one line per dead job; when there are none it says on stderr where
it looked (exit 0). A local-file queue directory that does not exist (a wrong
--data-dir) is an error: exit 1, for `replay` too.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from typing import Any

from service.app import config
from service.app.card_cli import Subcommands

HELP = "list or replay push notifications that could not be delivered (the dead-letter store)"


def add_parser(sub: Subcommands) -> None:
    p = sub.add_parser(
        "push-dead",
        help=HELP,
        description=HELP + ". " + " ".join((__doc__ or "").split("\n\n")[1:]),
    )
    p.add_argument(
        "action", choices=("list", "replay"), help="list dead jobs, or put them back in the queue"
    )
    p.add_argument("ids", nargs="*", help="replay: the dead job ids (as `list` prints them)")
    p.add_argument("--all", action="store_true", help="replay: every dead job")
    p.add_argument("--json", action="store_true", help="list: one JSON object per line")
    p.add_argument("--limit", type=int, default=100, help="list: at most this many (default 100)")
    p.add_argument("--config", metavar="FILE", help="TOML file with settings, as for serve")
    p.add_argument(
        "--data-dir",
        help="the server's data directory (local-file queue; default: A2A_DATA_DIR, "
        "data_dir in --config, else ./data)",
    )
    p.add_argument("--push-queue", help="local-file (default) or redis-streams")
    p.add_argument("--push-redis-url", help="Redis URL (redis-streams queue)")
    p.add_argument("--push-redis-prefix", help="Redis key prefix (redis-streams queue)")


def main(args: argparse.Namespace) -> int:
    flags = {
        "data_dir": args.data_dir,
        "push_queue": args.push_queue,
        "push_redis_url": args.push_redis_url,
        "push_redis_prefix": args.push_redis_prefix,
    }
    try:
        settings = config.load(args.config, flags=flags)
    except config.ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    if args.action == "replay" and not args.ids and not args.all:
        print("replay: name the dead job ids to replay, or pass --all", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_run(args, settings))
    except Exception as exc:  # Redis unreachable, unreadable directory, ...: one clear line
        print(f"push-dead: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _where(settings: config.Settings, queue: Any) -> str:
    """Where the dead jobs live, for messages (a Redis URL without its credentials)."""
    if settings.push_queue == "redis-streams":
        from service.push.queue_redis import safe_url

        return f"Redis stream {queue.dead_stream} at {safe_url(queue.url)}"
    return f"{queue.root.absolute()} (local-file queue)"


async def _run(args: argparse.Namespace, settings: config.Settings) -> int:
    from service.push import open_queue
    from service.push.queue_file import FileQueue

    queue = open_queue(settings, settings.data_dir)
    if isinstance(queue, FileQueue) and not queue.root.is_dir():  # the local-file queue
        # A wrong data directory: say so (replay would create a queue nobody reads).
        print(
            f"no push queue at {queue.root.absolute()}: is --data-dir right? "
            f"(else A2A_DATA_DIR, data_dir in --config, default ./data)",
            file=sys.stderr,
        )
        return 1
    try:
        if args.action == "list":
            found = await queue.list_dead(args.limit)
            if not found and not args.json:  # --json: no lines means none, nothing else is printed
                print(f"no dead push jobs in {_where(settings, queue)}", file=sys.stderr)
            for dead in found:
                job = dead.job
                if args.json:
                    print(
                        json.dumps(
                            {
                                "id": dead.id,
                                "error": dead.error,
                                "failedAt": dead.failed_at,
                                "taskId": job.task_id,
                                "configId": job.config_id,
                                "seq": job.seq,
                                "attempts": job.attempts,
                                "tenant": job.tenant,
                                "owner": job.owner,
                            }
                        )
                    )
                else:
                    when = datetime.datetime.fromtimestamp(dead.failed_at, datetime.UTC).isoformat(
                        timespec="seconds"
                    )
                    print(
                        f"{dead.id}  task={job.task_id} config={job.config_id} seq={job.seq} "
                        f"attempts={job.attempts} failed={when}  {dead.error}"
                    )
            return 0
        count = await queue.replay_dead(None if args.all else args.ids)
        print(f"replayed {count} dead push job(s)")
        return 0 if count or args.all else 1
    finally:
        await queue.close()
