"""`python -m service push-dead`: where it looked, what it lists, a missing queue, and a Redis
stream named without credentials."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

from service.push.queue_base import Job
from service.push.queue_file import FileQueue
from tests.conftest import ROOT


def push_dead(*args: str, cwd=ROOT, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("A2A_")}
    return subprocess.run(
        [sys.executable, "-m", "service", "push-dead", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean, "PYTHONPATH": str(ROOT), **env},
    )


def test_push_dead_list_says_where_it_looked(tmp_path):
    queue = tmp_path / "data" / "push-queue"
    (queue / "dead").mkdir(parents=True)
    out = push_dead("list", A2A_DATA_DIR=str(tmp_path / "data"))  # configured, no --data-dir
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr.strip() == f"no dead push jobs in {queue} (local-file queue)"
    out = push_dead("list", cwd=tmp_path)  # the default: ./data, shown as an absolute path
    assert (
        out.returncode == 0
        and out.stderr.strip() == f"no dead push jobs in {queue} (local-file queue)"
    )
    assert (
        push_dead("list", "--json", "--data-dir", str(tmp_path / "data")).stderr == ""
    )  # none: no lines


def test_push_dead_lists_a_dead_job_from_the_configured_directory(tmp_path):
    async def one_dead_job() -> None:
        q = FileQueue(tmp_path / "data" / "push-queue")
        await q.open()
        try:
            await q.enqueue([Job.new(("", "", "task-9", "cfg"), 1, "{}", time.time())])
            [lease] = await q.lease(1)
            await q.dead(lease, lease.job, "HTTP 410")
        finally:
            await q.close()

    asyncio.run(one_dead_job())
    out = push_dead("list", A2A_DATA_DIR=str(tmp_path / "data"))
    assert out.returncode == 0 and out.stderr == ""
    assert "task=task-9" in out.stdout and "HTTP 410" in out.stdout


def test_push_dead_with_a_missing_queue_directory_exits_1(tmp_path):
    wrong = tmp_path / "nope"
    for args in (("list",), ("replay", "--all")):
        out = push_dead(*args, "--data-dir", str(wrong))
        assert out.returncode == 1 and out.stdout == ""
        assert out.stderr.startswith(
            f"no push queue at {wrong / 'push-queue'}: is --data-dir right?"
        )
    assert not wrong.exists()  # replay did not create a queue nobody reads


def test_push_dead_list_names_the_redis_stream_without_credentials(tmp_path):
    from tests.push_util import REDIS_URL, redis_or_skip, unique_prefix

    asyncio.run(redis_or_skip())
    prefix = unique_prefix()
    out = push_dead(
        "list",
        "--push-queue",
        "redis-streams",
        "--push-redis-url",
        REDIS_URL,
        "--push-redis-prefix",
        prefix,
    )
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr.strip() == f"no dead push jobs in Redis stream {prefix}:dead at {REDIS_URL}"
    with_password = REDIS_URL.replace("://", "://someone:hunter2-secret@", 1)
    out = push_dead(
        "list",
        "--push-queue",
        "redis-streams",
        "--push-redis-url",
        with_password,
        "--push-redis-prefix",
        prefix,
    )
    assert "hunter2-secret" not in out.stdout + out.stderr


def test_push_dead_list_of_a_queue_that_never_dead_lettered_says_it_is_empty(tmp_path):
    queue = tmp_path / "data" / "push-queue"
    queue.mkdir(parents=True)  # a queue directory without dead/ yet
    out = push_dead("list", "--data-dir", str(tmp_path / "data"))
    assert out.returncode == 0 and out.stdout == ""
    assert out.stderr.strip() == f"no dead push jobs in {queue} (local-file queue)"
