"""Small pieces of push delivery: backoff, Retry-After, sealing with key rotation, headers."""

from __future__ import annotations

import asyncio
import email.utils
import os
import subprocess
import sys
import time

import pytest
from cryptography.fernet import Fernet

from gen import a2a_pb2 as pb
from service.push.crypto import SecretBox, SecretUnavailable
from service.push.delivery import RetryPolicy, parse_retry_after, request_headers
from service.push.queue_base import Job
from service.push.queue_file import FileQueue
from tests.conftest import ROOT


def test_backoff_doubles_is_capped_and_jittered():
    policy = RetryPolicy(base=1.0, cap=8.0)
    for attempts, ceiling in [(1, 1), (2, 2), (3, 4), (4, 8), (9, 8)]:
        delays = [policy.delay(attempts, None) for _ in range(200)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert max(delays) - min(delays) > ceiling / 10  # jitter spreads retries out
    assert policy.delay(1, 30.0) == 30.0  # Retry-After wins when longer


def test_retry_after_in_seconds_or_as_a_date():
    now = time.time()
    assert parse_retry_after("120", now) == 120
    date = email.utils.formatdate(now + 60, usegmt=True)
    assert 58 <= parse_retry_after(date, now) <= 61
    assert parse_retry_after("soon", now) is None and parse_retry_after(None, now) is None
    assert parse_retry_after(email.utils.formatdate(now - 60, usegmt=True), now) == 0


def test_sealing_rotates_keys_and_refuses_unknown_ones():
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    config = pb.TaskPushNotificationConfig(
        id="c",
        task_id="t",
        url="https://x.example/",
        token="tok",
        authentication=pb.AuthenticationInfo(scheme="Bearer", credentials="cred"),
    )
    sealed = SecretBox([old]).seal_config(config)
    assert sealed.token.startswith("fernet:") and "tok" not in sealed.token
    assert sealed.authentication.credentials.startswith("fernet:") and sealed.url == config.url
    assert SecretBox([new, old]).open_config(sealed) == config  # rotation: old keys still open
    resealed = SecretBox([new, old]).seal_config(config)
    assert SecretBox([new]).open_config(resealed) == config
    with pytest.raises(SecretUnavailable):
        SecretBox([new]).open_config(sealed)
    assert SecretBox([new]).open("plain-from-before") == "plain-from-before"
    assert SecretBox([new]).seal("") == ""


def test_request_headers():
    job = Job.new(("tenant", "owner", "task-1", "cfg.1"), 7, "{}", time.time())
    bare = dict(request_headers(job, pb.TaskPushNotificationConfig(url="https://x.example/")))
    assert bare == {
        "Content-Type": "application/json",
        "User-Agent": bare["User-Agent"],
        "Idempotency-Key": "task-1/7/cfg.1",
    }
    full = dict(
        request_headers(
            job,
            pb.TaskPushNotificationConfig(
                url="https://x.example/",
                token="t",
                authentication=pb.AuthenticationInfo(credentials="c"),
            ),
        )
    )
    assert full["Authorization"] == "Bearer c" and full["X-A2A-Notification-Token"] == "t"


# ---------------------------------------------------------------- python -m service push-dead


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
