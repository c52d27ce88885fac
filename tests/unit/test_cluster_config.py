"""Scale-out settings: the bus URL, prefix, workers and lease are checked by name, and
`--workers > 1` is refused wherever the workers could not behave as one service."""

from __future__ import annotations

import pytest

from service.app import config
from service.app.workers import check_workers


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"A2A_BUS": "http://x"}, "bus: expected redis://HOST:PORT/DB"),
        ({"A2A_BUS": "amqp://u:secret@h"}, "bus: expected"),
        ({"A2A_BUS_PREFIX": "a b"}, "bus_prefix: must be a non-empty word"),
        ({"A2A_WORKERS": "0"}, "workers: must be between 1 and 256"),
        ({"A2A_LEASE_SECONDS": "0.5"}, "lease_seconds: must be between 1 and 3600"),
    ],
)
def test_bad_values_name_the_key(env, fragment):
    with pytest.raises(config.ConfigError) as info:
        config.load(None, env=env)
    assert fragment in str(info.value)
    assert "secret" not in str(info.value)


SHARED = {"A2A_STORE": "postgresql://a2a@db/a2a", "A2A_BUS": "redis://r:6379/0"}


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({}, 'set store = "postgresql://USER@HOST/DB" and bus = "redis://HOST:6379/0"'),
        ({"A2A_STORE": "postgresql://a2a@db/a2a"}, "need a shared store and bus"),
        ({"A2A_BUS": "redis://r:6379/0"}, "need a shared store and bus"),
        (SHARED | {"A2A_GRPC_PORT": "0"}, "give fixed grpc_port and http_port"),
        (
            SHARED | {"A2A_PUSH_NOTIFICATIONS": "true"},
            "push_queue = redis-streams and push_secret_keys",
        ),
    ],
)
def test_workers_are_refused_saying_what_to_set(env, fragment):
    settings = config.load(None, env={"A2A_WORKERS": "2", **env})
    with pytest.raises(config.ConfigError) as info:
        check_workers(settings)
    assert fragment in str(info.value)


def test_workers_on_a_shared_store_and_bus_are_accepted():
    check_workers(config.load(None, env={"A2A_WORKERS": "2", **SHARED}))
    check_workers(config.load(None, env={}))  # one process: nothing to check
