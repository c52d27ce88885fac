"""service.setting: the field every settings section declares its keys with, and the shared
checks. Each check takes the values it should and names what is wrong with the others in
the words the configuration's messages use (operators and tests read them)."""

from __future__ import annotations

import dataclasses

import pytest

from service.setting import (
    SECONDS,
    at_least,
    between,
    check_section,
    greater_than_0,
    one_of,
    own_fields,
    port,
    rule,
    setting,
)


@pytest.mark.parametrize(
    ("check", "good", "bad"),
    [
        (at_least(1), [1, 2, 10**9], [(0, "must be at least 1 (got 0)")]),
        (at_least(32), [32, 33], [(31, "must be at least 32 (got 31)")]),
        (
            at_least(0, "must not be negative"),
            [0, 5],
            [(-1, "must not be negative")],
        ),
        (
            at_least(1, "must be at least {low} (bytes), got {value}"),
            [1],
            [(0, "must be at least 1 (bytes), got 0")],
        ),
        (
            greater_than_0(),
            [0.001, 1, 86400.0],
            [(0.0, "must be greater than 0 (got 0.0)"), (-2, "must be greater than 0 (got -2)")],
        ),
        (
            greater_than_0("must be positive (seconds between keep-alive comments)"),
            [15.0],
            [(0, "must be positive (seconds between keep-alive comments)")],
        ),
        (
            between(1, 256),
            [1, 100, 256],
            [(0, "must be between 1 and 256, got 0"), (257, "must be between 1 and 256, got 257")],
        ),
        (
            between(0, 3600, SECONDS),
            [0, 0.5, 3600],
            [(3600.5, "must be between 0 and 3600 (seconds), got 3600.5")],
        ),
        (
            between(0, 30 * 86400, "must be between {low} (off) and {high}, got {value}"),
            [0, 2592000],
            [(-0.5, "must be between 0 (off) and 2592000, got -0.5")],
        ),
        (
            port("0-65535"),
            [0, 80, 65535],
            [
                (-1, "-1 is not a port number (0-65535)"),
                (65536, "65536 is not a port number (0-65535)"),
            ],
        ),
        (
            port("0-65535, or -1 for none", low=-1),
            [-1, 0, 65535],
            [(-2, "-2 is not a port number (0-65535, or -1 for none)")],
        ),
        (
            one_of(("none", "console", "otlp")),
            ["none", "otlp"],
            [("OTLP", "expected one of none, console, otlp, got 'OTLP'")],
        ),
        (
            one_of(("local-file", "redis-streams"), "local-file or redis-streams"),
            ["redis-streams"],
            [("", "expected local-file or redis-streams, got ''")],
        ),
        (
            rule(lambda v: "://" in v, "expected a URL, got {value!r}"),
            ["http://x"],
            [("x", "expected a URL, got 'x'")],
        ),
    ],
)
def test_a_check_takes_good_values_and_names_what_is_wrong_with_bad_ones(check, good, bad):
    for value in good:
        assert check(value) is None, value
    for value, problem in bad:
        assert check(value) == problem


def test_a_rule_message_may_hold_braces_in_the_value():
    check = rule(lambda v: False, "got {value!r}")
    assert check("{x}") == "got '{x}'"


@dataclasses.dataclass
class Section:
    """A section as the configuration composes them."""

    size: int = setting(10, "how many", check=at_least(1))
    mode: str = setting("a", "which", check=one_of(("a", "b")))
    names: list[str] = setting(["x"], "entries")
    token: str = setting("", "a secret", secret=True, shown="none")


@dataclasses.dataclass
class Composed(Section):
    port: int = setting(0, "listen port", check=port("0-65535"))


def test_setting_keeps_default_help_shown_default_and_secret_in_the_field():
    fields = {f.name: f for f in dataclasses.fields(Section)}
    assert fields["size"].default == 10
    assert fields["size"].metadata["help"] == "how many"
    assert "default" not in fields["size"].metadata
    assert fields["token"].metadata["default"] == "none"
    assert fields["token"].repr is False and "token" not in repr(Section())
    assert fields["size"].repr is True


def test_a_list_default_is_a_fresh_copy_per_instance():
    one, two = Section(), Section()
    one.names.append("y")
    assert two.names == ["x"]
    assert Section().names == ["x"]


def test_check_section_names_the_key_of_the_first_bad_value():
    check_section(Section(), Section)
    with pytest.raises(ValueError, match=r"^size: must be at least 1 \(got 0\)$"):
        check_section(Section(size=0), Section)
    with pytest.raises(ValueError, match=r"^mode: expected one of a, b, got 'c'$"):
        check_section(Section(mode="c"), Section)


def test_check_section_checks_only_the_keys_the_class_declares():
    bad_base = Composed(size=0)
    check_section(bad_base, Composed)  # size is Section's key: its own validator checks it
    with pytest.raises(ValueError, match="^size: "):
        check_section(bad_base, Section)
    with pytest.raises(ValueError, match=r"^port: 70000 is not a port number \(0-65535\)$"):
        check_section(Composed(port=70000), Composed)
    assert [f.name for f in own_fields(Composed)] == ["port"]
