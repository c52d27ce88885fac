"""Authentication settings: secrets from the environment, the config file or *_file files (never
flags); errors that name the key and entry but never the secret; the credential checks
themselves; the startup warning rules."""

from __future__ import annotations

import base64
import logging

import pytest

from service.app import config
from service.app.cli import build_parser
from service.app.config import ConfigError, Settings, validate
from service.auth.credentials import SecretTable
from service.auth.settings import authenticator_from, is_loopback, startup_warnings
from tests.security_util import API_KEYS, BASIC, TOKENS, all_static_settings, basic_header

SECRET = "s3cret-value-that-must-not-leak"


def test_secret_table_finds_the_name_of_a_secret():
    table = SecretTable.of([("a", "token-aaaaaaaaaaaaaaaa"), ("b", "token-bbbbbbbbbbbbbbbb")])
    assert table.match("token-bbbbbbbbbbbbbbbb") == "b"
    assert table.match("token-aaaaaaaaaaaaaaaa") == "a"
    assert table.match("token-aaaaaaaaaaaaaaa") is None
    assert table.match("") is None
    assert "token" not in repr(table)


async def test_each_scheme_checks_its_own_credential():
    auth = authenticator_from(Settings(**all_static_settings()))
    assert auth is not None
    assert await auth.principal({"authorization": f"Bearer {TOKENS['bob']}"}) == "bearer:bob"
    assert await auth.principal({"authorization": f"bEaReR   {TOKENS['bob']}  "}) == "bearer:bob"
    assert (
        await auth.principal({"authorization": basic_header("carol", BASIC["carol"])})
        == "basic:carol"
    )
    assert await auth.principal({"x-api-key": API_KEYS["ci"]}) == "apikey:ci"
    # A wrong Authorization does not hide a right API key (each offered credential is tried).
    assert (
        await auth.principal({"authorization": "Bearer nope", "x-api-key": API_KEYS["ci"]})
        == "apikey:ci"
    )
    from service.protocol.errors import UnauthenticatedError

    for metadata in (
        {},
        {"authorization": "Bearer"},
        {"authorization": "Basic " + base64.b64encode(b"carol").decode()},
        {"authorization": basic_header("carol", BASIC["carol"] + "x")},
        {"authorization": basic_header("dave", BASIC["carol"])},
    ):
        with pytest.raises(UnauthenticatedError):
            await auth.principal(metadata)
    metadata = {"authorization": f"Bearer {TOKENS['bob']}", "a2a-version": "1.0"}
    assert await auth(metadata) == "bearer:bob"
    assert metadata == {"a2a-version": "1.0"}  # the credentials stop here


def test_authentication_is_off_unless_something_is_configured():
    assert authenticator_from(Settings()) is None


def test_secrets_from_the_environment():
    env = {
        "A2A_AUTH_BEARER_TOKENS": f"alice={TOKENS['alice']},bob={TOKENS['bob']}",
        "A2A_AUTH_API_KEYS": f"ci={API_KEYS['ci']}",
        "A2A_AUTH_API_KEY_HEADER": "X-Agent-Key",
    }
    settings = config.load(env=env)
    auth = authenticator_from(settings)
    assert auth is not None and auth.api_key_header == "X-Agent-Key"
    assert set(auth.security_schemes()) == {"bearer", "apiKey"}


def test_secrets_from_files(tmp_path, caplog):
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# bearer tokens\nalice={TOKENS['alice']}\n\n  bob={TOKENS['bob']}  \n")
    tokens.chmod(0o600)
    users = tmp_path / "users"
    users.write_text("carol:a password with spaces\n")
    users.chmod(0o644)
    keys = tmp_path / "keys"
    keys.write_text(f"ci={API_KEYS['ci']}\n")
    keys.chmod(0o600)
    conf = tmp_path / "service.toml"
    conf.write_text(
        f'auth_bearer_tokens_file = "{tokens}"\nauth_basic_users_file = "{users}"\n'
        f'auth_api_keys = ["deploy={"d" * 20}"]\nauth_api_keys_file = "{keys}"\n'
    )
    caplog.set_level(logging.WARNING, logger="service.auth")
    settings = config.load(str(conf), env={})
    warned = [r.getMessage() for r in caplog.records if "readable by other users" in r.getMessage()]
    assert warned and all(
        str(users) not in m and str(users.parent) not in m for m in warned
    )  # no path in logs
    auth = authenticator_from(settings)
    assert auth.bearer_tokens.match(TOKENS["bob"]) == "bob"
    assert auth.basic_users.match("carol:a password with spaces") == "carol"
    assert auth.api_keys.match("d" * 20) == "deploy" and auth.api_keys.match(API_KEYS["ci"]) == "ci"


@pytest.mark.parametrize(
    "values,message",
    [
        (dict(auth_bearer_tokens=[SECRET]), "auth_bearer_tokens: entry 1: expected NAME=TOKEN"),
        (
            dict(auth_bearer_tokens=["alice=short"]),
            "entry 1 (alice): the token must be at least 16",
        ),
        (dict(auth_bearer_tokens=[f"a b={SECRET}"]), "expected NAME=TOKEN"),
        (
            dict(auth_bearer_tokens=[f"a={SECRET}", f"a={SECRET}x"]),
            "entry 2: 'a' is configured twice",
        ),
        (dict(auth_bearer_tokens=[f"a={SECRET} x"]), "must not contain spaces"),
        (
            dict(auth_basic_users=[f"carol={SECRET}"]),
            "auth_basic_users: entry 1: expected NAME:PASSWORD",
        ),
        (dict(auth_basic_users=["carol:short"]), "the password must be at least 8"),
        (dict(auth_api_keys=[f"ci:{SECRET}"]), "auth_api_keys: entry 1: expected NAME=KEY"),
        (dict(auth_api_keys_file="/nonexistent/keys"), "auth_api_keys_file: cannot read"),
        (dict(auth_api_key_header="Authorization"), "auth_api_key_header"),
        (dict(auth_api_key_header="grpc-key"), "auth_api_key_header"),
        (dict(auth_api_key_header="x-key-bin"), "auth_api_key_header"),
        (dict(auth_api_key_header="X Key"), "auth_api_key_header"),
    ],
)
def test_configuration_errors_name_the_key_and_never_the_secret(values, message):
    with pytest.raises(ConfigError) as info:
        validate(Settings(**values))
    assert message in str(info.value)
    assert SECRET not in str(info.value)


def test_no_flags_for_secrets_and_no_secrets_in_repr():
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    flags = {option for action in serve._actions for option in action.option_strings}
    for secret_key in ("auth_bearer_tokens", "auth_basic_users", "auth_api_keys"):
        assert "--" + secret_key.replace("_", "-") not in flags
    settings = Settings(**all_static_settings())
    assert TOKENS["alice"] not in repr(settings) and API_KEYS["ci"] not in repr(settings)
    assert BASIC["carol"] not in repr(settings)


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.5", False),
        ("agent.example.com", False),
    ],
)
def test_which_hosts_count_as_loopback(host, loopback):
    assert is_loopback(host) is loopback
    warnings = startup_warnings(Settings(host=host), None, None)
    assert bool(warnings) is not loopback
