"""Errors that teach: a misspelt config key or `A2A_*` variable gets the nearest known
names (not a list of all), `serve --help` says where every key is documented, and a
refused PostgreSQL login is named as such, user and host shown, never the password.
(As processes: tests/integration/test_config_cli.py; against a real PostgreSQL:
tests/integration/test_store_pg_causes.py.)"""

from __future__ import annotations

import asyncpg
import pytest

from a2a_call import client as call_client
from service.agents import command
from service.app import config, workers
from service.app.cli import SERVE_EPILOG, build_parser
from service.store import redact_url
from service.store.pg_conn import connect_failure, who

DOCS = 'README "Configuration"'


def file_error(tmp_path, text: str) -> str:
    cfg = tmp_path / "a2a.toml"
    cfg.write_text(text)
    with pytest.raises(config.ConfigError) as info:
        config.load(str(cfg), env={})
    return str(info.value)


def test_an_unknown_file_key_suggests_the_nearest_instead_of_listing_all(tmp_path):
    message = file_error(tmp_path, "grpc_prot = 1\n")
    assert "unknown key 'grpc_prot'; did you mean grpc_port?" in message
    assert DOCS in message and "python -m service config-reference" in message
    assert "known:" not in message and "drain_seconds" not in message
    assert len(message) < 250


@pytest.mark.parametrize(
    ("key", "nearest"),
    [
        ("GRPC_PORT", "grpc_port"),
        ("A2A_HTTP_PORT", "http_port"),
        ("push_notification", "push_notifications"),
    ],
)
def test_case_and_the_env_prefix_do_not_hide_the_nearest_key(tmp_path, key, nearest):
    assert f"did you mean {nearest}?" in file_error(tmp_path, f"{key} = 1\n")


def test_an_unknown_key_near_nothing_still_says_where_the_keys_are(tmp_path):
    message = file_error(tmp_path, "zebra = 1\n")
    assert "unknown key 'zebra' (" in message and "did you mean" not in message
    assert DOCS in message


def test_unknown_a2a_variables_are_warned_about_one_line_each_without_their_value():
    env = {
        "A2A_GRPC_PROT": "s3cret-one",
        "A2A_ZEBRA": "s3cret-two",
        "A2A_GRPC_PORT": "1",  # a setting
        "A2A_OUTPUT_DIR": "/x",  # used by the project otherwise
        "A2A_WORKER_INDEX": "0",
        "HOME": "/root",  # not ours
        "a2a_grpc_port": "1",  # not read (names are case-sensitive) and not ours to judge
    }
    warnings = config.unknown_env(env)
    assert len(warnings) == 2
    prot, zebra = warnings
    assert prot.startswith("environment: A2A_GRPC_PROT is not a setting and is ignored")
    assert "did you mean A2A_GRPC_PORT?" in prot and DOCS in prot
    assert (
        zebra.startswith("environment: A2A_ZEBRA is not a setting") and "did you mean" not in zebra
    )
    assert not any("s3cret" in w for w in warnings)


def test_no_warning_for_settings_or_the_allow_list():
    env = {config.ENV_PREFIX + key.upper(): "x" for key in config.FIELDS}
    env.update(dict.fromkeys(config.OTHER_ENV, "x"))
    assert config.unknown_env(env) == []


def test_the_allow_list_names_the_variables_the_project_reads():
    for name in (
        command.OUTPUT_DIR_ENV,
        workers.WORKER_ENV,
        call_client.ENV_BEARER,
        call_client.ENV_API_KEY,
        call_client.ENV_BASIC,
    ):
        assert name in config.OTHER_ENV
    assert not config.OTHER_ENV & {config.ENV_PREFIX + k.upper() for k in config.FIELDS}


def test_serve_help_says_where_every_key_is_documented(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--help"])
    assert SERVE_EPILOG in capsys.readouterr().out
    for fragment in ("--config FILE", "A2A_<KEY>", DOCS, "python -m service config-reference"):
        assert fragment in SERVE_EPILOG


URL = "postgresql://alice:hunter2@db.example:5432/a2a"


def refused(cls: type[Exception], text: str) -> str:
    message = connect_failure(URL, cls(text))
    assert "hunter2" not in message
    assert "user alice at db.example:5432, database a2a" in message
    return message


def test_a_wrong_password_is_named_not_called_an_outage():
    message = refused(
        asyncpg.InvalidPasswordError, 'password authentication failed for user "alice"'
    )
    assert message.startswith("PostgreSQL authentication failed")
    assert "check the password" in message and "unreachable" not in message


def test_an_unknown_role_and_a_missing_database_are_named():
    role = refused(asyncpg.InvalidAuthorizationSpecificationError, 'role "alice" does not exist')
    assert role.startswith("PostgreSQL has no such role") and "CREATE ROLE" in role
    nologin = refused(
        asyncpg.InvalidAuthorizationSpecificationError, 'role "alice" is not permitted to log in'
    )
    assert nologin.startswith("PostgreSQL refused the login") and "LOGIN" in nologin
    hba = refused(
        asyncpg.InvalidAuthorizationSpecificationError, 'no pg_hba.conf entry for host "x"'
    )
    assert hba.startswith("PostgreSQL refused the login") and "pg_hba.conf" in hba
    db = refused(asyncpg.InvalidCatalogNameError, 'database "a2a" does not exist')
    assert db.startswith("PostgreSQL database missing") and "createdb" in db
    denied = refused(asyncpg.InsufficientPrivilegeError, 'permission denied for database "a2a"')
    assert "GRANT CONNECT" in denied


def test_a_network_failure_is_still_unreachable_and_a_bad_url_is_named():
    down = refused(ConnectionRefusedError, "Connect call failed")
    assert down.startswith("PostgreSQL unreachable")
    bad = refused(ValueError, "invalid literal for int()")
    assert bad.startswith("PostgreSQL store URL not usable")


def test_who_falls_back_like_the_driver(monkeypatch):
    monkeypatch.setenv("PGUSER", "bob")
    monkeypatch.delenv("PGHOST", raising=False)
    assert who("postgresql:///tasks") == "user bob at localhost, database tasks"
    assert who("postgresql://h/db?user=carol&password=pw") == "user carol at h, database db"
    assert who("postgres://u%40x:p%40ss@h1:5432,h2:5433/") == (
        "user u@x at h1:5432,h2:5433, database u@x"
    )


def test_redact_url_hides_a_password_query_parameter_too():
    assert redact_url("postgresql://h/db?user=u&password=pw&x=1") == (
        "postgresql://h/db?user=u&password=***&x=1"
    )
    assert redact_url("postgresql://u:secret@h:5432/db") == "postgresql://***@h:5432/db"
