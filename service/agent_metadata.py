"""The `a2a_service` metadata extension: tool progress and token usage as status-update
metadata, capped and sanitised before it leaves the agent.

A tool's input is described by its shape only (keys, value types, lengths), never
its values. A result, a tool name or an id keeps its values, but every string is
cut to a fixed length and scrubbed of what must not reach a client: values of
keys that name a credential (password, token, secret, authorization, api key ...),
token-like strings (bearer tokens, JWTs, well-known key prefixes, long random
strings, private-key blocks, user:password@ in URLs) and local file paths. Sizes
are bounded too (keys per object, items per list, nesting depth), so no agent can
make one event large. The agent API (`TurnContext.tool_started` ...) builds its
events here; the card advertises `EXTENSION_URI` (docs/agents.md, "The
a2a_service metadata namespace").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from a2a_wire.event_ids import NAMESPACE as NAMESPACE  # this service's metadata key

EXTENSION_URI = "urn:a2a-service:metadata:v1"
EXTENSION_DESCRIPTION = (
    "Status-update metadata under the a2a_service key: tool progress (tool.status, "
    "tool.toolUseId, tool.name, tool.inputSummary with the input's shape only, tool.result "
    "capped), token usage (usage.inputTokens, outputTokens, totalTokens), permission requests "
    "(input, permission, inputReceived), stored files (byteSize, sha256), the working "
    "directory (cwd) and, on gRPC streams, each event's sequence number (eventId, to resume "
    "with the last-event-id metadata). Values are capped and sanitised; clients may ignore it."
)

TOOL_STATUSES = ("started", "input_delta", "input_complete", "completed", "failed")

MAX_TEXT = 256  # characters of one string value
MAX_NAME = 128  # characters of a tool name, a tool use id or an object key
MAX_KEYS = 32  # members of one object
MAX_ITEMS = 16  # items of one list
MAX_DEPTH = 4  # nesting below the top-level value
MAX_TOKENS = 10**15  # a usage count beyond this is not a count

_MARGIN = 256  # characters past a string's cap that are still scrubbed before the cut

REDACTED = "[redacted]"
PATH = "[path]"

_SENSITIVE_WORDS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "token",
        "authorization",
        "auth",
        "apikey",
        "credential",
        "credentials",
        "cookie",
        "privatekey",
        "sessionid",
        "signature",
    }
)
_SENSITIVE_PAIRS = frozenset(
    {("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key"), ("session", "id")}
)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")

_SECRETS = [
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
    ),
    re.compile(r"(?i)\b(?:bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),  # a JWT
    re.compile(
        r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{12,}"  # API keys of LLM providers, Stripe
        r"|\bgh[pousr]_[A-Za-z0-9]{20,}"  # GitHub
        r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
        r"|\bxox[abprs]-[A-Za-z0-9-]{10,}"  # Slack
        r"|\bAKIA[0-9A-Z]{16}\b"  # AWS access key id
        r"|\bAIza[0-9A-Za-z_-]{30,}"  # Google API key
    ),
    re.compile(
        r"(?i)\b(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key"
        r"|authorization|auth|credentials?)\b(\s*[:=]\s*)\S+"
    ),
    re.compile(r"(?<=://)[^/@\s:]+:[^/@\s]+(?=@)"),  # user:password@ in a URL
]
# Long random-looking runs (keys, hashes): letters and digits mixed, 32 or more; a UUID is an
# id, not a secret, and stays.
_RANDOM_RUN = re.compile(
    r"\b(?![0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b)"
    r"(?=[A-Za-z0-9+/_=-]*\d)(?=[A-Za-z0-9+/_=-]*[A-Za-z])[A-Za-z0-9+/_=-]{32,}"
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PATHS = re.compile(
    r"\bfile://\S*"
    r"|(?<![\w:/.~-])~?/(?:[\w.@~+-]+/)*[\w.@~+-]+/?"  # /home/me/x, ~/x (not the path of a URL)
    r"|\b[A-Za-z]:\\[^\s\"'<>|]*"  # C:\Users\me
    r"|\\\\[^\s\"'<>|]+"  # \\server\share
)


def is_sensitive_key(key: str) -> bool:
    """Whether a key names a credential: `password`, `api_key`, `X-Auth-Token`, `apiKey`."""
    words = [w.lower() for w in _WORD.findall(key)]
    if any(w in _SENSITIVE_WORDS for w in words):
        return True
    if "".join(words) in _SENSITIVE_WORDS:
        return True
    return any(pair in _SENSITIVE_PAIRS for pair in zip(words, words[1:], strict=False))


def clean_text(text: str, limit: int = MAX_TEXT, *, random_runs: bool = True) -> str:
    """`text` without secrets or local paths, cut to `limit` characters (marked with …).
    `random_runs`: also redact long random-looking strings (not for ids and names)."""
    # Scrub a bounded prefix only (the patterns' cost grows with the text): a margin past
    # `limit` lets a secret that starts before the cut still be recognised whole.
    text = text[: limit + _MARGIN]
    patterns = [*_SECRETS, _RANDOM_RUN] if random_runs else _SECRETS
    for pattern in patterns:
        if pattern.groups:  # keep the key and its separator, drop the value
            text = pattern.sub(lambda m: m.group(0)[: m.end(1) - m.start(0)] + REDACTED, text)
        else:
            text = pattern.sub(REDACTED, text)
    text = _PATHS.sub(PATH, text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clean_name(value: object, what: str) -> str:
    """A tool name or tool use id: a non-empty string, sanitised and capped."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return clean_text(_CONTROL.sub("", value.strip()), MAX_NAME, random_runs=False)


def sanitize(value: Any, depth: int = 0) -> Any:
    """A JSON value with every string cleaned, credentials' values redacted and its size
    bounded; anything that is not JSON becomes its (cleaned) text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value if abs(value) < 2**53 else clean_text(str(value))
    if isinstance(value, str):
        return clean_text(value)
    if depth >= MAX_DEPTH and isinstance(value, Mapping | list | tuple):
        return f"[{_type_name(value)}]"
    if isinstance(value, Mapping):
        return _members(value, REDACTED, lambda member: sanitize(member, depth + 1))
    if isinstance(value, list | tuple):
        items = [sanitize(v, depth + 1) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append(f"… {len(value) - MAX_ITEMS} more")
        return items
    return clean_text(str(value))


def _members(
    value: Mapping[Any, Any], redacted: Any, member_of: Callable[[Any], Any]
) -> dict[str, Any]:
    """At most MAX_KEYS members, names cleaned, a credential-named member's value `redacted`
    and every other one `member_of(value)`; a last "…" member says how many were left out."""
    out: dict[str, Any] = {}
    for i, (key, member) in enumerate(value.items()):
        if i == MAX_KEYS:
            out["…"] = f"{len(value) - MAX_KEYS} more"
            break
        name = clean_text(str(key), MAX_NAME)
        out[name] = redacted if is_sensitive_key(str(key)) else member_of(member)
    return out


def input_summary(value: Any, depth: int = 0) -> Any:
    """The shape of a tool's input, never its values: an object's keys with the shape of
    each value, `string(12)` (its length), `array(3)`, `number`, `boolean`, `null`; the
    value of a key that names a credential is `redacted`, whatever it is."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return f"string({len(value)})"
    if isinstance(value, bytes | bytearray):
        return f"bytes({len(value)})"
    if isinstance(value, Mapping):
        if depth >= MAX_DEPTH:
            return f"object({len(value)})"
        return _members(value, "redacted", lambda member: input_summary(member, depth + 1))
    if isinstance(value, Sequence):
        return f"array({len(value)})"
    return _type_name(value)


def _type_name(value: Any) -> str:
    if isinstance(value, Mapping):
        return f"object({len(value)})"
    if isinstance(value, list | tuple):
        return f"array({len(value)})"
    return "value"


def tool_metadata(
    status: str,
    tool_use_id: str,
    name: str,
    *,
    input: Any = None,
    has_input: bool = False,
    result: Any = None,
    has_result: bool = False,
    input_chars: int | None = None,
) -> dict[str, Any]:
    """`{a2a_service: {tool: {...}}}` for one step of a tool call."""
    if status not in TOOL_STATUSES:
        raise ValueError(f"tool status must be one of {', '.join(TOOL_STATUSES)}, got {status!r}")
    tool: dict[str, Any] = {
        "status": status,
        "toolUseId": clean_name(tool_use_id, "tool_use_id"),
        "name": clean_name(name, "tool name"),
    }
    if has_input:
        tool["inputSummary"] = input_summary(input)
    if input_chars is not None:
        tool["inputChars"] = _count(input_chars, "input_chars")
    if has_result:
        tool["result"] = sanitize(result)
    return {NAMESPACE: {"tool": tool}}


def usage_metadata(
    input_tokens: int, output_tokens: int, total_tokens: int | None = None
) -> dict[str, Any]:
    """`{a2a_service: {usage: {...}}}`; the total is the sum unless given."""
    inputs = _count(input_tokens, "input_tokens")
    outputs = _count(output_tokens, "output_tokens")
    total = inputs + outputs if total_tokens is None else _count(total_tokens, "total_tokens")
    return {
        NAMESPACE: {"usage": {"inputTokens": inputs, "outputTokens": outputs, "totalTokens": total}}
    }


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        raise ValueError(f"{what} must be a whole number from 0 to {MAX_TOKENS}, got {value!r}")
    return value
