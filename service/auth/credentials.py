"""Static credentials: parsing `NAME=SECRET` lists and checking them in constant time.

Secrets come from the environment (`A2A_AUTH_BEARER_TOKENS=ci=...,alice=...`), the
TOML config file, or a `*_file` setting naming a file with one entry per line
(blank lines and `#` comments ignored) -- never from a command-line flag, where
they would show in `ps` and shell history.

A lookup compares the offered secret with *every* configured one through
`hmac.compare_digest` on SHA-256 digests (equal lengths, so neither the secret's
length nor the position of a match shows in the timing), and never stops early.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
import stat
from dataclasses import dataclass

log = logging.getLogger("service.auth")

NAME = re.compile(r"[A-Za-z0-9._@-]{1,64}")  # a credential's name, part of the principal
MIN_TOKEN_CHARS = 16  # bearer tokens and API keys
MIN_PASSWORD_CHARS = 8


class CredentialError(ValueError):
    """A credential entry that cannot be used; the message names the entry, never the secret."""


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True, slots=True)
class SecretTable:
    """name -> secret digest; `match(secret)` is the name whose secret it is, or None."""

    entries: tuple[tuple[str, bytes], ...]

    @classmethod
    def of(cls, pairs: list[tuple[str, str]]) -> SecretTable:
        return cls(tuple((name, _digest(secret)) for name, secret in pairs))

    def match(self, offered: str) -> str | None:
        given = _digest(offered)
        found: str | None = None
        for name, expected in self.entries:  # no early exit: the time does not depend on where
            if hmac.compare_digest(given, expected) and found is None:
                found = name
        return found

    def __bool__(self) -> bool:
        return bool(self.entries)

    def __repr__(self) -> str:  # never the digests
        return f"SecretTable({len(self.entries)} entries)"


def read_lines(path: str, key: str) -> list[str]:
    """The entries of a secrets file; warns when others may read it."""
    try:
        mode = os.stat(path).st_mode
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise CredentialError(f"{key}: cannot read {path!r} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise CredentialError(f"{key}: {path!r} is not UTF-8 text") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("%s: the file is readable by other users; chmod 600 it", key)
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def parse_entries(
    entries: list[str], sep: str, key: str, what: str, min_chars: int, allow_spaces: bool = False
) -> list[tuple[str, str]]:
    """`NAME<sep>SECRET` entries -> [(name, secret)]. Errors say which entry (by number and
    name) is wrong and how, without repeating the secret."""
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries, 1):
        name, found, secret = entry.partition(sep)
        name = name.strip()
        where = f"{key}: entry {number}"
        if not found or not NAME.fullmatch(name):
            raise CredentialError(
                f"{where}: expected NAME{sep}{what.upper()} with a NAME of letters, digits, '.', '_', '@' "
                "or '-' (at most 64)"
            )
        if len(secret) < min_chars:
            raise CredentialError(
                f"{where} ({name}): the {what} must be at least {min_chars} characters"
            )
        lowest = 0x20 if allow_spaces else 0x21
        if any(ord(c) < lowest or ord(c) == 0x7F for c in secret):
            no = "control characters" if allow_spaces else "spaces or control characters"
            raise CredentialError(f"{where} ({name}): the {what} must not contain {no}")
        if name in seen:
            raise CredentialError(f"{where}: {name!r} is configured twice")
        seen.add(name)
        pairs.append((name, secret))
    return pairs


def load_pairs(
    inline: list[str],
    file: str,
    *,
    key: str,
    sep: str,
    what: str,
    min_chars: int,
    allow_spaces: bool = False,
) -> list[tuple[str, str]]:
    """The entries of a setting and of its `_file` companion, checked."""
    entries = list(inline)
    if file:
        entries += read_lines(file, f"{key}_file")
    return parse_entries(entries, sep, key, what, min_chars, allow_spaces)
