"""program_environment: the command agent's program gets an allow-list, and what the operator
adds with `command_env` is refused when it is one of the server's own variables or points at
one of its secret files."""

from __future__ import annotations

import os

import pytest

from service.agents.command import program_environment

SERVER = {
    "PATH": "/usr/bin",
    "HOME": "/home/a2a",
    "LC_ALL": "C",
    "A2A_AUTH_BEARER_TOKENS": "ci=secret-token-value",
    "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer x",
    "AWS_SECRET_ACCESS_KEY": "not-for-the-program",
    "GREETING": "hi",
}


def test_only_the_allow_list_and_what_is_named():
    env = program_environment(["GREETING", "MODE=a=b", "ABSENT"], SERVER)
    assert env == {
        "PATH": "/usr/bin",
        "HOME": "/home/a2a",
        "LC_ALL": "C",
        "GREETING": "hi",
        "MODE": "a=b",
    }


@pytest.mark.parametrize(
    "entry",
    ["A2A_AUTH_BEARER_TOKENS", "a2a_output_dir=/tmp", "OTEL_EXPORTER_OTLP_HEADERS", "Otel_X=1"],
)
def test_the_servers_own_variables_are_refused(entry):
    with pytest.raises(ValueError, match="never passed"):
        program_environment([entry], SERVER)


@pytest.mark.parametrize("entry", ["", "=x", "1ABC", "A-B=1", "A B"])
def test_names_that_are_no_variable_names_are_refused(entry):
    with pytest.raises(ValueError, match="NAME or NAME=VALUE"):
        program_environment([entry], SERVER)


def test_a_value_naming_a_secret_file_is_refused(tmp_path):
    secret = tmp_path / "tokens"
    secret.write_text("ci=secret-token-value\n")
    link = tmp_path / "link"
    link.symlink_to(secret)
    source = {**SERVER, "KEYS": str(link)}
    for entries in (["KEYS"], [f"KEYS={secret}"], [f"SEARCH=/etc{os.pathsep}{secret}"]):
        with pytest.raises(ValueError, match="secret"):
            program_environment(entries, source, secret_files=[str(secret)])
    assert program_environment([f"OTHER={tmp_path}"], source, secret_files=[str(secret)])
