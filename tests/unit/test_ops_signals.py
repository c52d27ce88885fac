"""The pieces behind the operator signals: deployment warnings from the settings, pid and
worker in both log formats, the announced ready line, the access line's transport fields."""

from __future__ import annotations

import io
import json
import logging

from service.app import config
from service.app.deployment_warnings import deployment_warnings
from service.calls.access import client_address, user_agent
from service.ops import logs
from service.ops.logs import JsonFormatter, Redactor, TextFormatter

PG = "postgresql://a2a@db/a2a"
KEY = "q6AXhDqZNuHkBLSXiU8MjEJwHqVG9OsjsrBgZDIxbfc="


def _warnings(**env: str) -> list[str]:
    return deployment_warnings(config.load(env={f"A2A_{k.upper()}": v for k, v in env.items()}))


def test_a_localhost_card_is_warned_of_only_behind_all_interfaces():
    [warning] = _warnings(host="0.0.0.0")
    assert "public_url" in warning and "grpc_public_address" in warning
    [warning] = _warnings(host="::", public_url="https://a.example")
    assert "public_url" not in warning and "grpc_public_address" in warning
    [warning] = _warnings(host="0.0.0.0", grpc_public_address="a.example:443")
    assert "public_url (" in warning and "grpc_public_address" not in warning
    assert _warnings(host="0.0.0.0", http_port="-1", grpc_public_address="a:1") == []
    assert _warnings(host="127.0.0.1") == [] and _warnings(host="10.0.0.5") == []


def test_per_process_push_keys_are_warned_of_on_a_shared_store():
    [warning] = _warnings(store=PG, push_notifications="true")
    assert warning.startswith("PUSH SECRET KEYS ARE PER PROCESS")
    assert _warnings(store=PG, push_notifications="true", push_secret_keys=KEY) == []
    assert _warnings(store=PG) == []  # push off
    assert _warnings(push_notifications="true") == []  # SQLite: one process


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("service", logging.INFO, __file__, 1, msg, None, None)


def test_every_record_names_its_process_and_worker():
    record = _record("hello")
    single = json.loads(JsonFormatter(Redactor()).format(record))
    assert single["pid"] == record.process and "worker" not in single
    worker = json.loads(JsonFormatter(Redactor(), worker="1").format(record))
    assert worker["worker"] == 1 and worker["pid"] == record.process
    assert f"[pid {record.process}] INFO service: hello" in TextFormatter(Redactor()).format(record)
    text = TextFormatter(Redactor(), worker="1").format(record)
    assert f"[worker 1 pid {record.process}] INFO service: hello" in text


def test_the_ready_line_follows_the_log_format():
    root = logging.getLogger()
    saved = list(root.handlers), root.level
    try:
        for chosen in ("text", "json"):
            logs.configure("INFO", chosen, stream=io.StringIO(), worker="0")
            out = io.StringIO()
            logs.announce("A2A service ready: grpc=1 http=2", {"grpc_port": 1}, out)
            line = out.getvalue()
            assert line.endswith("\n") and line.count("\n") == 1
            if chosen == "text":
                assert line == "A2A service ready: grpc=1 http=2\n"
            else:
                doc = json.loads(line)
                assert doc["message"] == "A2A service ready: grpc=1 http=2"
                assert doc["grpc_port"] == 1 and doc["worker"] == 0 and doc["logger"] == "service"
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_client_addresses_and_user_agents_as_the_access_line_holds_them():
    assert client_address("ipv4:10.1.2.3:5678") == "10.1.2.3"
    assert client_address("ipv6:[::1]:5678") == "::1"
    assert client_address("unix:/run/a2a.sock") == "unix:/run/a2a.sock"
    assert client_address("192.168.0.9") == "192.168.0.9"
    assert user_agent("curl/8.5.0") == "curl/8.5.0"
    assert user_agent("a\nb\x00c") == "a?b?c"
    assert len(user_agent("x" * 1000)) == 256
