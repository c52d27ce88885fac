"""Reading a card or a key set: an http(s) URL or a local regular file, capped in size
(4 MiB) and time (10 seconds, DNS and slow drips included), redirects followed only
within the same origin. Shared by `card verify` and the `a2a-call` client.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import stat
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import IO, Any

WELL_KNOWN_CARD = "/.well-known/agent-card.json"
DEFAULT_JWKS_PATH = "/.well-known/jwks.json"
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
TIMEOUT_SECONDS = 10.0
MAX_REDIRECTS = 5


class FetchError(Exception):
    """A document that could not be read; the message names it and says why."""


def is_http(source: str) -> bool:
    return source.lower().startswith(("http://", "https://"))


def card_url(target: str) -> str:
    parts = urllib.parse.urlsplit(target)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN_CARD, "", ""))
    return target


def origin_of(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an http(s) URL; None for anything else or a malformed one.
    Loopback names (localhost, 127.0.0.0/8, ::1) are one host: the same machine."""
    try:
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            return None
        host = parts.hostname.lower()
        return (
            scheme,
            "loopback" if is_loopback(host) else host,
            parts.port or (443 if scheme == "https" else 80),
        )
    except ValueError:  # a bad port
        return None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to the same scheme, host and port, at most MAX_REDIRECTS times."""

    max_redirections = MAX_REDIRECTS

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        if origin_of(newurl) is None or origin_of(newurl) != origin_of(req.full_url):
            fp.close()
            raise FetchError(
                f"{req.full_url}: redirected to {newurl}, another origin (not followed)"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


def _read_url(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with _OPENER.open(request, timeout=TIMEOUT_SECONDS) as response:
        data: bytes = response.read(MAX_DOCUMENT_BYTES + 1)
        return data


def _read_file(path: str) -> bytes:
    """At most MAX_DOCUMENT_BYTES + 1 bytes of a regular file (O_NONBLOCK: a FIFO cannot block the open)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FetchError(f"{path}: not a regular file")
        chunks: list[bytes] = []
        remaining = MAX_DOCUMENT_BYTES + 1
        while remaining > 0 and (chunk := os.read(fd, min(remaining, 1 << 16))):
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _with_deadline(source: str, read: Callable[[str], bytes]) -> bytes:
    """read(source) in a daemon thread, given up after TIMEOUT_SECONDS (covers DNS and slow drips,
    which socket timeouts alone do not bound)."""
    result: list[bytes] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(read(source))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name="card-verify-fetch", daemon=True)
    worker.start()
    worker.join(TIMEOUT_SECONDS)
    if worker.is_alive():
        raise FetchError(f"{source}: cannot read it (timed out after {TIMEOUT_SECONDS:g} s)")
    if failure:
        raise failure[0]
    return result[0]


def read_document(source: str) -> bytes:
    """The bytes of an http(s) URL or a local regular file, capped in size and time."""
    try:
        data = _with_deadline(source, _read_url if is_http(source) else _read_file)
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{source}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        # DNS failure, refused connection, timeout, a bad URL, a broken response
        reason = (
            getattr(exc, "reason", None)
            or getattr(exc, "strerror", None)
            or str(exc)
            or type(exc).__name__
        )
        raise FetchError(f"{source}: cannot read it ({reason})") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise FetchError(f"{source}: larger than {MAX_DOCUMENT_BYTES} bytes")
    return data


def fetch_json(source: str) -> Any:
    """A JSON document from an http(s) URL or a local regular file."""
    data = read_document(source)
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise FetchError(f"{source}: not JSON") from None
