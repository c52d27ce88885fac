"""The configuration reference, generated from the settings sections so it cannot drift.

Every key is a field of a settings section (`Settings`' own, then each section it is
composed of, in order), and every field is a `setting()` that says what it means (its
help, kept in the field's metadata):

    probe_port: int = setting(-1, "…", shown="shown default")

The help is required (a test fails on a field without one); `shown` is only for a
default that needs words (`the agent's own`) — otherwise the field's own default is
shown. The flag column comes from the command line's parser. `python -m service
config-reference --write docs/configuration.md` replaces the text between the markers; the
unit test compares that file with `reference()`. A new key needs nothing but its field.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

from service.app.config import Settings
from service.setting import own_fields

BEGIN = (
    "<!-- config-reference: generated from the settings sections by "
    "`make config-reference`; edit the fields' help, not this table -->"
)
END = "<!-- /config-reference -->"
OWN_TITLE = "The service: listeners, store, agent, agent card, shutdown"


def sections(root: type = Settings) -> Iterator[tuple[str, list[dataclasses.Field[Any]]]]:
    """(title, fields) per section: the root's own first, then its bases in order."""
    yield OWN_TITLE, own_fields(root)
    for base in root.__bases__:
        if dataclasses.is_dataclass(base):
            doc = " ".join((base.__doc__ or base.__name__).split())
            yield doc.split(". ")[0].rstrip("."), list(dataclasses.fields(base))


def shown_default(f: dataclasses.Field[Any]) -> str:
    if "default" in f.metadata:
        return str(f.metadata["default"])
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:  # pragma: no cover - every setting has a default
        return ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value is None or value == "" or value == []:
        return ""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, list):
        return "`" + ",".join(str(v) for v in value) + "`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reference(flags: Mapping[str, str], root: type = Settings) -> str:
    """The tables (markers included). `flags`: key -> command-line flag, for keys that have one."""
    out = [BEGIN, ""]
    for title, fields in sections(root):
        out += [
            f"**{_cell(title)}**",
            "",
            "| key | flag | default | meaning |",
            "|---|---|---|---|",
        ]
        for f in fields:
            flag = f"`{flags[f.name]}`" if f.name in flags else ""
            help_text = f.metadata.get("help", "")
            cells = (f"`{f.name}`", flag, _cell(shown_default(f)), _cell(help_text))
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out.append(END)
    return "\n".join(out)


def undocumented() -> list[str]:
    """Keys whose field has no help text."""
    return [f.name for _, fields in sections() for f in fields if not f.metadata.get("help")]


def replace_in(text: str, table: str) -> str:
    """`text` with the part between the markers (inclusive) replaced by `table`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers are missing: put {BEGIN!r} and {END!r} where the table goes")
    return text[:start] + table + text[end + len(END) :]


def write(path: pathlib.Path, flags: Mapping[str, str]) -> bool:
    """Rewrite the table in `path`; True when something changed."""
    before = path.read_text()
    after = replace_in(before, reference(flags))
    if after != before:
        path.write_text(after)
    return after != before
