"""`python -m service card verify URL`: fetch an agent card and verify its signatures.

URL is the card's address, an agent's base URL (`/.well-known/agent-card.json`
is appended), or a local JSON file. Keys, by signature algorithm:

- ES256/384/512, RS256, EdDSA: from `--jwks` (a URL or a file) when given:
  pin a key set you trust. Without it, from the signature's `jku` header, else
  from the agent's `/.well-known/jwks.json`; the key is picked by `kid`. Keys
  named by the card itself prove integrity only (the card and the key set come
  from the same place, not who published them), and the output says so.
- HS256: the shared secret, from the environment variable named by
  `--secret-env` or from `--secret-file` (never from the command line).

A `jku` is used only when it is https:// (or http:// on a loopback host:
127.0.0.0/8, ::1, localhost) and has the card URL's origin (scheme, host and
port; loopback names count as one host); `--allow-foreign-jku` lifts the origin
rule (not the scheme rule). A card
read from a file has no origin, so its `jku` needs `--allow-foreign-jku`. A
`jku` is never read as a local file; a refused one fails that signature (exit 1
when no other signature verifies).

Every fetch is capped at 4 MiB and 10 seconds; redirects are followed only
within the same origin, at most 5. Local files (the card, --jwks, --secret-file)
must be regular files (not /dev/stdin, a FIFO, a device) and are read up to the
same cap.

Exit status: 0 a signature verified, 1 none did, 2 the card or keys could not be read
(DNS failure, refused connection, timeout, HTTP error, not JSON, too large, not a
regular file; one line on stderr says which).
"""

from __future__ import annotations

import argparse
import http.client
import ipaddress
import json
import os
import stat
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import IO, Any

from service.cards.signing import (
    ASYMMETRIC_ALGS,
    DEFAULT_JWKS_PATH,
    SigningError,
    SigningKey,
    decode_header,
    key_from_jwk,
    verify_card_json,
)

WELL_KNOWN_CARD = "/.well-known/agent-card.json"
MAX_DOCUMENT_BYTES = 4 * 1024 * 1024
TIMEOUT_SECONDS = 10.0
MAX_REDIRECTS = 5
SECRET_HINT = "pass the shared secret with --secret-env NAME or --secret-file FILE"
NOT_PINNED = "not from a key you pinned with --jwks"


class FetchError(Exception):
    pass


def add_parser(sub: argparse._SubParsersAction) -> None:
    card = sub.add_parser(
        "card",
        help="agent card tools (verify signatures)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    card_sub = card.add_subparsers(dest="card_command", required=True)
    verify = card_sub.add_parser(
        "verify",
        help="fetch a card and verify its signatures",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verify.add_argument(
        "url", help="card URL, agent base URL, or a local card JSON file (a regular file)"
    )
    verify.add_argument(
        "--jwks",
        metavar="URL_OR_FILE",
        help="JWK Set you trust with the public keys (pins them: the card's jku and the "
        "agent's own JWKS are then not used)",
    )
    verify.add_argument(
        "--allow-foreign-jku",
        action="store_true",
        help="follow a jku of another origin than the card URL (or of a card read from a "
        "file); still https:// only (http:// on loopback), and integrity only",
    )
    verify.add_argument(
        "--secret-env", metavar="NAME", help="environment variable holding the HS256 secret"
    )
    verify.add_argument("--secret-file", metavar="FILE", help="file holding the HS256 secret")
    verify.add_argument(
        "--algorithms",
        default=",".join(ASYMMETRIC_ALGS),
        help="comma-separated allowlist (default: %(default)s; HS256 is added "
        "when a secret is given)",
    )


def _is_http(source: str) -> bool:
    return source.lower().startswith(("http://", "https://"))


def _card_url(target: str) -> str:
    parts = urllib.parse.urlsplit(target)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN_CARD, "", ""))
    return target


def _origin(url: str) -> tuple[str, str, int] | None:
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
            "loopback" if _is_loopback(host) else host,
            parts.port or (443 if scheme == "https" else 80),
        )
    except ValueError:  # a bad port
        return None


def _is_loopback(host: str) -> bool:
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
        if _origin(newurl) is None or _origin(newurl) != _origin(req.full_url):
            fp.close()
            raise FetchError(
                f"{req.full_url}: redirected to {newurl}, another origin (not followed)"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


def _read_url(url: str) -> bytes:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with _OPENER.open(request, timeout=TIMEOUT_SECONDS) as response:
        return response.read(MAX_DOCUMENT_BYTES + 1)


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
        data = _with_deadline(source, _read_url if _is_http(source) else _read_file)
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


class KeyFinder:
    """Picks the key for a signature's protected header; remembers where keys came from."""

    def __init__(
        self,
        card_url: str,
        jwks_source: str | None,
        secret: bytes | None,
        *,
        allow_foreign_jku: bool = False,
    ) -> None:
        self.card_url = card_url
        self.jwks_source = jwks_source
        self.secret = secret
        self.allow_foreign_jku = allow_foreign_jku
        self.sources: list[tuple[str, str]] = []  # (kind, where): pinned, secret, jku, well-known
        self.unreadable: list[str] = []  # key sources that could not be read (exit status 2)
        self._sets: dict[str, list[SigningKey]] = {}

    def _default_jwks(self) -> str:
        origin = _origin(self.card_url)
        if origin is None:
            raise SigningError("no key source: pass --jwks (the card was read from a file)")
        parts = urllib.parse.urlsplit(self.card_url)
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, DEFAULT_JWKS_PATH, "", ""))

    def _check_jku(self, jku: str) -> None:
        """SigningError unless the policy in the module docstring allows fetching this jku."""
        origin = _origin(jku)
        if origin is None or not (origin[0] == "https" or origin[1] == "loopback"):
            raise SigningError(
                f"jku {jku!r} refused: only https:// (or http:// on a loopback host) "
                f"is fetched; pass --jwks with keys you trust"
            )
        if self.allow_foreign_jku:
            return
        card_origin = _origin(self.card_url)
        if card_origin is None:
            raise SigningError(
                f"jku {jku!r} refused: the card was read from a file, so no origin vouches "
                f"for it; pass --jwks with keys you trust (or --allow-foreign-jku)"
            )
        if origin != card_origin:
            raise SigningError(
                f"jku {jku!r} refused: not the card URL's origin (scheme, host and port "
                f"of {self.card_url}); pass --jwks with keys you trust (or --allow-foreign-jku)"
            )

    def _keys(self, source: str) -> list[SigningKey]:
        if source not in self._sets:
            try:
                doc = fetch_json(source)
                entries = doc.get("keys") if isinstance(doc, dict) else None
                if not isinstance(entries, list):
                    raise FetchError(f"{source}: not a JWK Set (no 'keys' array)")
            except FetchError as exc:
                self.unreadable.append(str(exc))
                raise SigningError(str(exc)) from None
            keys = []
            for entry in entries:
                try:
                    keys.append(key_from_jwk(entry))
                except SigningError:
                    continue  # a key of a kind we do not use is not an error
            self._sets[source] = keys
        return self._sets[source]

    def __call__(self, header: dict[str, Any]) -> SigningKey | None:
        kid = header.get("kid")
        if header.get("alg") == "HS256":
            if self.secret is None:
                raise SigningError(f"HS256 signature: {SECRET_HINT}")
            self.sources.append(("secret", "the shared secret"))
            return SigningKey(kid=str(kid), alg="HS256", secret=self.secret)
        jku = header.get("jku")
        if self.jwks_source:
            kind, source = "pinned", self.jwks_source
        elif jku is not None and jku != "":
            if not isinstance(jku, str):
                raise SigningError("the jku header is not a string")
            self._check_jku(jku)
            kind, source = "jku", jku
        else:
            kind, source = "well-known", self._default_jwks()
        for key in self._keys(source):
            if key.kid == kid:
                self.sources.append((kind, source))
                return key
        return None


def _read_secret(args: argparse.Namespace) -> bytes | None:
    if args.secret_env:
        value = os.environ.get(args.secret_env)
        if value is None:
            raise FetchError(f"--secret-env: the environment variable {args.secret_env} is not set")
        return value.encode()
    if args.secret_file:
        try:
            return read_document(args.secret_file).rstrip(b"\r\n")
        except FetchError as exc:
            raise FetchError(f"--secret-file {exc}") from None
    return None


def _has_hs256(card: dict[str, Any]) -> bool:
    """Whether a signature of the card says HS256 (needs the shared secret to check)."""
    signatures = card.get("signatures")
    for sig in signatures if isinstance(signatures, list) else []:
        protected = sig.get("protected") if isinstance(sig, dict) else None
        if not isinstance(protected, str):
            continue  # decode_header would refuse it too
        try:
            if decode_header(protected).get("alg") == "HS256":
                return True
        except SigningError:
            continue
    return False


def main(args: argparse.Namespace) -> int:
    if args.card_command != "verify":  # pragma: no cover - argparse allows only verify
        return 2
    try:
        secret = _read_secret(args)
        url = _card_url(args.url) if _is_http(args.url) else args.url
        card = fetch_json(url)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not isinstance(card, dict):
        print(f"error: {url}: not a JSON object", file=sys.stderr)
        return 2
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip()]
    if secret is not None and "HS256" not in algorithms:
        algorithms.append("HS256")
    finder = KeyFinder(url, args.jwks, secret, allow_foreign_jku=args.allow_foreign_jku)
    try:
        verified = verify_card_json(card, finder, algorithms=algorithms)
    except SigningError as exc:
        if finder.unreadable:  # no signature verified and keys could not be read: exit 2
            print(f"error: {finder.unreadable[0]}", file=sys.stderr)
            return 2
        hint = (
            f" (HS256: {SECRET_HINT})"
            if secret is None and _has_hs256(card) and SECRET_HINT not in str(exc)
            else ""
        )
        print(f"NOT VERIFIED: {url}: {exc}{hint}", file=sys.stderr)
        return 1
    kind, source = finder.sources[-1] if finder.sources else ("?", "?")
    trust = {
        "jku": f" (integrity only: the key came from the card's own jku, {NOT_PINNED})",
        "well-known": f" (integrity only: the key came from the agent's own JWKS, {NOT_PINNED})",
    }
    pinned = " (pinned with --jwks)" if kind == "pinned" else ""
    print(
        f"verified{trust.get(kind, '')}: {url}: signature by kid {verified.kid!r} ({verified.alg}), "
        f"key from {source}{pinned}"
    )
    return 0
