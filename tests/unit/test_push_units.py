"""Small pieces of push delivery: backoff, Retry-After, sealing with key rotation, headers."""

from __future__ import annotations

import email.utils
import time

import pytest
from cryptography.fernet import Fernet

from gen import a2a_pb2 as pb
from service.push.crypto import SecretBox, SecretUnavailable
from service.push.delivery import RetryPolicy, parse_retry_after, request_headers
from service.push.queue_base import Job


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
