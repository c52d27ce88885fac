"""Configuration sources: precedence, clear errors. (The CLI as a process:
tests/integration/test_config_cli.py.)"""

from __future__ import annotations

import pytest

from service.app import config


def test_precedence_file_env_flags(tmp_path):
    cfg = tmp_path / "a2a.toml"
    cfg.write_text(
        'grpc_port = 1111\nname = "From file"\nagent = "echo"\n'
        'skills = [{id = "s", name = "S", description = "d", tags = ["t"]}]\n'
    )
    s = config.load(
        str(cfg), env={"A2A_GRPC_PORT": "2222", "A2A_NAME": "From env"}, flags={"grpc_port": 3333}
    )
    assert s.grpc_port == 3333 and s.name == "From env" and s.skills[0]["id"] == "s"


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        (
            {"A2A_GRPC_PORT": "abc"},
            "grpc_port (from environment A2A_GRPC_PORT): expected an integer",
        ),
        ({"A2A_GRPC_PORT": "70000"}, "grpc_port: 70000 is not a port number"),
        (
            {"A2A_PUSH_NOTIFICATIONS": "maybe"},
            "push_notifications (from environment A2A_PUSH_NOTIFICATIONS): expected true or false",
        ),
        ({"A2A_AGENT": "command"}, "command: the command agent needs a program"),
        ({"A2A_LOG_LEVEL": "loud"}, "log_level"),
        (
            {"A2A_JSON_UNKNOWN_FIELDS": "drop"},
            'json_unknown_fields: expected "ignore" or "reject"',
        ),
        (
            {"A2A_STORE_COMMIT_INTERVAL_MS": "-1"},
            "store_commit_interval_ms: must be between 0 and 1000",
        ),
        (
            {"A2A_GRPC_JSONRPC": "true", "A2A_GRPC_PORT": "-1"},
            "grpc_jsonrpc: served on the gRPC listener, which grpc_port = -1 turns off",
        ),
        (
            {"A2A_GRPC_JSONRPC": "true", "A2A_UPSTREAM": "127.0.0.1:50051"},
            "grpc_jsonrpc: proxy mode serves no gRPC listener",
        ),
    ],
)
def test_bad_values_name_the_key(env, fragment):
    with pytest.raises(config.ConfigError) as info:
        config.load(None, env=env)
    assert fragment in str(info.value)


def test_unknown_file_key_and_bad_toml(tmp_path):
    bad_key = tmp_path / "k.toml"
    bad_key.write_text("grpc_prot = 1\n")
    with pytest.raises(config.ConfigError, match="unknown key 'grpc_prot'"):
        config.load(str(bad_key), env={})
    bad_toml = tmp_path / "t.toml"
    bad_toml.write_text("= nope")
    with pytest.raises(config.ConfigError, match="not valid TOML"):
        config.load(str(bad_toml), env={})


def test_default_store_is_sqlite_in_data_dir():
    s = config.load(None, env={"A2A_DATA_DIR": "/srv/a2a"})
    assert s.store_url == "sqlite:/srv/a2a/tasks.db"
