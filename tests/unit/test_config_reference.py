"""The configuration tables of docs/configuration.md are the generator's output (`make
config-reference`), every key has help text, and the flag column is the command line's."""

from __future__ import annotations

import dataclasses

from service.app import config, config_doc
from service.app.cli import setting_flags
from tests.process import ROOT


def test_the_reference_tables_are_generated_from_the_settings():
    reference = (ROOT / "docs" / "configuration.md").read_text()
    expected = config_doc.reference(setting_flags())
    assert expected in reference, (
        "docs/configuration.md's configuration tables differ from the settings sections: run "
        "`make config-reference` (python -m service config-reference --write "
        "docs/configuration.md)"
    )


def test_the_readme_links_the_reference_and_holds_no_copy():
    readme = (ROOT / "README.md").read_text()
    assert "(docs/configuration.md)" in readme
    assert config_doc.BEGIN not in readme and "| `grpc_port` |" not in readme


def test_every_key_has_help_and_appears_once():
    assert config_doc.undocumented() == []
    table = config_doc.reference(setting_flags())
    for key in config.FIELDS:
        assert table.count(f"| `{key}` |") == 1, key
    listed = [f.name for _, fields in config_doc.sections() for f in fields]
    assert sorted(listed) == sorted(config.FIELDS)


def test_every_flag_of_serve_is_a_key_and_shows_in_the_table():
    flags = setting_flags()
    assert flags["grpc_port"] == "--grpc-port" and "auth_bearer_tokens" not in flags
    table = config_doc.reference(flags)
    for key, flag in flags.items():
        assert f"| `{key}` | `{flag}` |" in table


def test_a_new_section_needs_only_its_fields_with_help():
    """What a branch adding keys does: a section whose fields have help, composed into the
    settings; the generated tables grow a titled table for it."""

    @dataclasses.dataclass
    class Extra:
        """Something new (README "New"). More words."""

        new_key: int = dataclasses.field(default=3, metadata={"help": "what it does"})

    @dataclasses.dataclass
    class Composed(Extra):
        own_key: bool = dataclasses.field(default=False, metadata={"help": "own"})

    table = config_doc.reference({}, Composed)
    assert f"**{config_doc.OWN_TITLE}**" in table and "| `own_key` |  | `false` | own |" in table
    assert '**Something new (README "New")**' in table
    assert "| `new_key` |  | `3` | what it does |" in table


def test_replace_in_keeps_the_text_around_the_markers():
    text = f"before\n{config_doc.BEGIN}\nold\n{config_doc.END}\nafter\n"
    out = config_doc.replace_in(text, f"{config_doc.BEGIN}\nnew\n{config_doc.END}")
    assert out == f"before\n{config_doc.BEGIN}\nnew\n{config_doc.END}\nafter\n"
