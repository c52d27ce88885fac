"""Input validation for incoming messages, before any work or storage.

Every binding reaches `A2AApi`, which runs `InputPolicy.check` on each
SendMessage / SendStreamingMessage message after the generic contract checks:

- the number of parts;
- inline sizes: `text` parts, and `raw` / `data` parts with a text-like media
  type, up to `max_text_bytes` (default 1 MiB); `raw` / `data` parts with any
  other media type up to `max_binary_bytes` (default 5 MiB). `raw` parts with a
  text-like media type must be valid UTF-8;
- media types: syntax, and acceptance by the agent's declared input modes
  (the card's `defaultInputModes` plus every skill's `inputModes`; `*/*` and
  `type/*` wildcards). Parts without one count as `text/plain` (text),
  `application/json` (data), `application/octet-stream` (raw) or the type
  guessed from a URL's file name. A refusal is ContentTypeNotSupportedError
  naming the type and the accepted ones;
- `url` parts: `file://` URLs must name existing readable regular files inside
  the message's workspace (service.inputs.workspace; none unless `workspace_roots` is
  configured), sized like inline parts but with `max_file_bytes` (default
  25 MiB) for binary media; `http(s)://` only when remote URLs are enabled; any
  other scheme is refused;
- the message's working directory and its context's workspace (service.inputs.workspace).

Errors name the field and the rule, never a local path or the server's setup. A
`file://` part refused for a reason that depends on the disk (missing, not a
regular file, unreadable, too big, out of reach) always gets the same message;
the reason goes to the log.
"""

from __future__ import annotations

import mimetypes
import os
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field

from gen import a2a_pb2 as pb
from service.inputs.early import PartLimits
from service.inputs.early import size_text as _size
from service.inputs.workspace import (
    FILE_REFUSED,
    ContextLookup,
    Workspaces,
    refusal,
    set_message_cwd,
)
from service.permission.envelope import is_answer_part
from service.protocol.errors import ContentTypeNotSupportedError, invalid_field
from service.protocol.media import essence
from service.setting import at_least, between, check_section, setting
from service.store import Scope

MiB = 1024 * 1024
DEFAULT_MAX_PARTS = 100
DEFAULT_MAX_TEXT_BYTES = 1 * MiB
DEFAULT_MAX_BINARY_BYTES = 5 * MiB
DEFAULT_MAX_FILE_BYTES = 25 * MiB
MAX_URL_CHARS = 8192

TEXT_LIKE = frozenset(
    {
        "application/json",
        "application/x-ndjson",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/xml",
        "application/javascript",
        "application/ecmascript",
        "application/x-sh",
        "application/sql",
        "application/graphql",
        "application/x-www-form-urlencoded",
        "application/csv",
        "application/x-python",
    }
)
TEXT_SUFFIXES = ("+json", "+xml", "+yaml")
IMPLIED = {"text": "text/plain", "data": "application/json", "raw": "application/octet-stream"}


def media_type_of(raw: str, field_name: str) -> str:
    """`type/subtype` in lower case (parameters dropped), or InvalidParams."""
    media_type = essence(raw)
    if media_type is None:
        raise invalid_field(field_name, "is not a media type (type/subtype, e.g. text/plain)")
    return media_type


@dataclass(frozen=True)
class InputLimits:
    max_parts: int = DEFAULT_MAX_PARTS
    max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES
    max_binary_bytes: int = DEFAULT_MAX_BINARY_BYTES
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    text_media_types: frozenset[str] = field(default_factory=frozenset)  # beyond TEXT_LIKE
    allow_remote_urls: bool = False


class InputModes:
    """The media types an agent accepts, with `*/*` and `type/*` wildcards."""

    def __init__(self, modes: Iterable[str]) -> None:
        self.declared = list(dict.fromkeys(m.strip() for m in modes if m.strip()))
        exact: set[str] = set()
        families: set[str] = set()
        self.anything = not self.declared
        for mode in self.declared:
            kind = mode.split(";", 1)[0].strip().lower()
            if kind in ("*/*", "*"):
                self.anything = True
            elif kind.endswith("/*"):
                families.add(kind[:-2])
            else:
                exact.add(kind)
        self.exact = frozenset(exact)
        self.families = frozenset(families)

    def accepts(self, media_type: str) -> bool:
        return (
            self.anything
            or media_type in self.exact
            or media_type.split("/", 1)[0] in self.families
        )

    @classmethod
    def of_card(cls, card: pb.AgentCard) -> InputModes:
        modes = list(card.default_input_modes)
        for skill in card.skills:
            modes.extend(skill.input_modes)
        return cls(modes)


@dataclass
class Admitted:
    """A checked message: `bind()` records its context's workspace just before the turn starts."""

    policy: InputPolicy
    scope: Scope
    context_id: str
    cwd: str | None

    def bind(self) -> None:
        self.policy.workspaces.bind(self.scope, self.context_id, self.cwd)


class InputPolicy:
    def __init__(self, limits: InputLimits, modes: InputModes, workspaces: Workspaces) -> None:
        self.limits = limits
        self.modes = modes
        self.workspaces = workspaces
        self.plain_text_accepted = modes.accepts(IMPLIED["text"])

    def is_text_like(self, media_type: str) -> bool:
        return (
            media_type.startswith("text/")
            or media_type in TEXT_LIKE
            or media_type in self.limits.text_media_types
            or media_type.endswith(TEXT_SUFFIXES)
        )

    async def check(self, scope: Scope, message: pb.Message, prefix: str = "message") -> Admitted:
        """Refuse what may not enter; on success the message carries its resolved workspace."""
        limits = self.limits
        if len(message.parts) > limits.max_parts:
            raise invalid_field(
                f"{prefix}.parts",
                f"has {len(message.parts)} parts; at most {limits.max_parts} are accepted",
            )
        files: list[
            tuple[int, str, str]
        ] = []  # (index, path, media type) checked after the workspace
        # A permission answer is for the service's side-band (the engine checks it), not
        # content for the agent: its JSON part needs no input mode of the agent's.
        follow_up = bool(message.task_id)
        for i, part in enumerate(message.parts):
            kind = part.WhichOneof("content")
            if kind == "text" and not part.media_type and self.plain_text_accepted:
                self._check_text(part.text, f"{prefix}.parts[{i}].text")  # the common case
                continue
            where = f"{prefix}.parts[{i}]"
            path = self._check_url(part.url, f"{where}.url") if kind == "url" else None
            if part.media_type:
                media = media_type_of(part.media_type, f"{where}.mediaType")
            elif kind == "url":
                media = self._guess(part)
            else:
                media = IMPLIED.get(kind or "", "application/octet-stream")
            if not self.modes.accepts(media) and not (follow_up and is_answer_part(part)):
                raise self._not_accepted(where, media)
            if kind == "text":
                self._check_text(part.text, f"{where}.text")
            elif kind == "raw":
                self._check_raw(part.raw, media, f"{where}.raw")
            elif kind == "data":
                size = part.data.ByteSize()
                limit = (
                    limits.max_text_bytes if self.is_text_like(media) else limits.max_binary_bytes
                )
                if size > limit:
                    raise invalid_field(
                        f"{where}.data",
                        f"is about {_size(size)}; inline data parts of "
                        f"type {media} may be at most {_size(limit)}",
                    )
            elif path is not None:
                files.append((i, path, media))
        context_id, cwd = await self.workspaces.resolve(scope, message)
        for i, path, media in files:
            where = f"{prefix}.parts[{i}].url"
            _, size = self.workspaces.check_file(path, cwd, where)
            limit = limits.max_text_bytes if self.is_text_like(media) else limits.max_file_bytes
            if size > limit:  # said like every other refusal: sizes tell what exists
                raise refusal(
                    where,
                    FILE_REFUSED,
                    f"a file of {_size(size)}; files of type {media} may be at most {_size(limit)}",
                    path,
                )
        if cwd is not None:
            set_message_cwd(message, cwd)
        return Admitted(self, scope, context_id, cwd)

    def _check_text(self, text: str, where: str) -> None:
        limit = self.limits.max_text_bytes
        # A str of n characters is n..4n bytes of UTF-8: encode only when it matters.
        if len(text) > limit or (
            len(text) * 4 > limit and len(text.encode("utf-8", "surrogatepass")) > limit
        ):
            size = len(text.encode("utf-8", "surrogatepass"))
            raise invalid_field(
                where, f"is {_size(size)}; inline text may be at most {_size(limit)}"
            )

    def _check_raw(self, raw: bytes, media: str, where: str) -> None:
        text_like = self.is_text_like(media)
        limit = self.limits.max_text_bytes if text_like else self.limits.max_binary_bytes
        if len(raw) > limit:
            raise invalid_field(
                where,
                f"is {_size(len(raw))}; inline raw parts of type {media} "
                f"may be at most {_size(limit)}",
            )
        if text_like:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                raise invalid_field(
                    where, f"is not valid UTF-8, as type {media} requires"
                ) from None

    def _check_url(self, url: str, where: str) -> str | None:
        """The local path of a file:// URL (checked later), None for an allowed remote URL."""
        if len(url) > MAX_URL_CHARS or any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
            raise invalid_field(
                where, f"must be a URL of at most {MAX_URL_CHARS} printable characters"
            )
        try:
            parts = urllib.parse.urlsplit(url)
        except ValueError:
            raise invalid_field(where, "is not a valid URL") from None
        scheme = parts.scheme.lower()
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise invalid_field(where, "file:// URLs must name a local file (no host)")
            if parts.query or parts.fragment:
                raise invalid_field(where, "file:// URLs take no query or fragment")
            try:
                return urllib.parse.unquote(parts.path, errors="strict")
            except UnicodeDecodeError:
                raise invalid_field(where, "is not a valid URL (bad percent-encoding)") from None
        if scheme in ("http", "https"):
            if not self.limits.allow_remote_urls:
                raise invalid_field(
                    where,
                    "remote URLs are not accepted by this agent; send the "
                    "content inline or as a file:// URL inside the workspace",
                )
            if not parts.hostname:
                raise invalid_field(where, "has no host")
            return None
        raise invalid_field(
            where,
            "must be a file:// URL"
            + (" or an http(s) URL" if self.limits.allow_remote_urls else ""),
        )

    def _guess(self, part: pb.Part) -> str:
        """A url part's media type from its file name or URL path (octet-stream if unknown)."""
        name = part.filename
        if not name and len(part.url) <= MAX_URL_CHARS:
            try:
                name = urllib.parse.urlsplit(part.url).path
            except ValueError:
                name = ""
        guessed = mimetypes.guess_type(name, strict=False)[0] if name else None
        return guessed.lower() if guessed else "application/octet-stream"

    def _not_accepted(self, where: str, media: str) -> ContentTypeNotSupportedError:
        accepted = ", ".join(self.modes.declared)
        return ContentTypeNotSupportedError(
            f"{where}: media type {media} is not accepted by this agent; accepted: {accepted}",
            metadata={"mediaType": media, "accepted": accepted},
            field_violations=[
                (f"{where}.mediaType", f"{media} is not one of the accepted input modes")
            ],
        )


# ----------------------------------------------------------------------------- settings


@dataclass
class InputSettings:
    """Limits of what a message may carry, and where file:// parts and working directories may point ([Security: input validation](security.md#input-validation))."""

    max_request_bytes: int = setting(
        16 * 1024 * 1024,
        "largest request: gRPC max receive message size and HTTP body limit "
        "(`RESOURCE_EXHAUSTED` / `413`)",
        shown="`16777216` (16 MiB)",
        check=between(64 * 1024, 2**31 - 1, "must be between {low} and {high} (got {value})"),
    )
    input_max_parts: int = setting(100, "parts per message", check=at_least(1))
    input_max_text_bytes: int = setting(
        1024 * 1024,
        "inline `text` parts, `raw`/`data` parts of text-like media types, and text-like "
        "`file://` files",
        shown="`1048576` (1 MiB)",
        check=at_least(1),
    )
    input_max_binary_bytes: int = setting(
        5 * 1024 * 1024,
        "inline `raw`/`data` parts of other media types (images, audio, …)",
        shown="`5242880` (5 MiB)",
        check=at_least(1),
    )
    input_max_file_bytes: int = setting(
        25 * 1024 * 1024,
        "`file://` files of other media types",
        shown="`26214400` (25 MiB)",
        check=at_least(1),
    )
    input_text_media_types: list[str] = setting(
        [], "media types to treat as text besides `text/*`, JSON, YAML, XML, TOML and the like"
    )
    input_allow_remote_urls: bool = setting(
        False, "accept `http(s)://` URL parts (the service never fetches them; the agent may)"
    )
    workspace_roots: list[str] = setting(
        [],
        "the directories `file://` parts and message working directories may point into "
        "(comma list in `A2A_WORKSPACE_ROOTS`). Without any, both are refused: the "
        "service is network-facing. To allow the working directory and the whole system temp"
        " directory, list them (`A2A_WORKSPACE_ROOTS=$PWD,/tmp`); better, only the"
        " directories agents need",
        shown="none",
    )


def policy_from_settings(
    s: InputSettings,
    card: pb.AgentCard,
    lookup: ContextLookup | None = None,
    denied: Iterable[str] = (),
) -> InputPolicy:
    """The policy for the configured limits, the card's input modes and the workspace roots.
    `lookup` finds a context's workspace in the task store (after a restart); `denied`: what
    messages may never point at (the data directory, every key, secret and certificate file)."""
    limits = InputLimits(
        max_parts=s.input_max_parts,
        max_text_bytes=s.input_max_text_bytes,
        max_binary_bytes=s.input_max_binary_bytes,
        max_file_bytes=s.input_max_file_bytes,
        text_media_types=frozenset(
            media_type_of(t, "input_text_media_types") for t in s.input_text_media_types
        ),
        allow_remote_urls=s.input_allow_remote_urls,
    )
    workspaces = Workspaces(list(s.workspace_roots), lookup, denied=list(denied))
    return InputPolicy(limits, InputModes.of_card(card), workspaces)


def part_limits(s: InputSettings) -> PartLimits:
    """What the bindings refuse before decoding a send: a part too large for any type."""
    text = s.input_max_text_bytes
    return PartLimits(text=text, inline=max(text, s.input_max_binary_bytes))


def validate_inputs(s: InputSettings) -> None:
    """Startup checks of max_request_bytes, input_* and workspace_roots (ValueError naming the key)."""
    check_section(s, InputSettings)
    for value in s.input_text_media_types:
        try:
            media_type_of(value, "input_text_media_types")
        except Exception:
            raise ValueError(
                f"input_text_media_types: {value!r} is not a media type like text/x-log"
            ) from None
    for root in s.workspace_roots:
        if not os.path.isdir(root):
            raise ValueError(f"workspace_roots: {root!r} is not an existing directory")
