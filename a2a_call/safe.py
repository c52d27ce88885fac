"""What a2a-call prints of what an agent sent, made safe for a terminal and for logs.

An agent controls the text of its cards, tasks, messages, artifacts, permission requests and
errors; a terminal obeys control characters, so `\\x1b[2K\\x1b[1A` in a permission target
could erase and rewrite the very line a person approves. `printable` escapes them, once,
for every such field. `redact` hides the credentials a URL can carry (its userinfo, and
query or fragment parameters named like a token) in messages the client prints or raises.
"""

from __future__ import annotations

import re
import urllib.parse

# C0 (but \t and \n, which text may hold), DEL, C1, lone surrogates (unprintable: they would
# crash the write), the bidirectional controls (they reorder what is shown) and the Unicode
# line and paragraph separators.
_ALWAYS = "\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029"
_IN_TEXT = re.compile(f"[{_ALWAYS}]")
_IN_LINE = re.compile(f"[\t\n{_ALWAYS}]")
_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>]+")
_SECRET_PARAM = re.compile(
    r"token|secret|passw|pwd|key|sig|auth|credential|session|code|jwt|bearer", re.I
)
HIDDEN = "***"


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object, *, multiline: bool = False) -> str:
    """VALUE as text with every control character escaped (`\\x1b`, `\\r`, `\\u202e`).

    `multiline`: for text a person reads as a block (messages, artifacts, descriptions),
    where a newline or a tab is the agent's layout; every other field (a name, an id, a
    permission target, a status line, an error) is one line, so its newlines are escaped
    too and it cannot pose as a line of the client's own."""
    text = value if isinstance(value, str) else str(value)
    return (_IN_TEXT if multiline else _IN_LINE).sub(_escape, text)


def _hide_params(params: str) -> str:
    pairs = []
    for pair in params.split("&"):
        name, eq, _value = pair.partition("=")
        pairs.append(f"{name}={HIDDEN}" if eq and _SECRET_PARAM.search(name) else pair)
    return "&".join(pairs)


def redact_url(url: str) -> str:
    """URL without its password (or a lone userinfo, which often is a token) and without the
    values of query and fragment parameters named like a credential."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:  # e.g. a bad IPv6 literal: hide everything before the host
        return re.sub(r"(://)[^/?#]*@", rf"\1{HIDDEN}@", url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, host = netloc.rpartition("@")
        user, colon, _password = userinfo.partition(":")
        netloc = f"{user}:{HIDDEN}@{host}" if colon else f"{HIDDEN}@{host}"
    return urllib.parse.urlunsplit(
        (parts.scheme, netloc, parts.path, _hide_params(parts.query), _hide_params(parts.fragment))
    )


def redact(text: str) -> str:
    """TEXT with every URL in it passed through `redact_url`."""
    return _URL.sub(lambda match: redact_url(match.group()), text)
