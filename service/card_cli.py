"""`python -m service card verify URL`: fetch an agent card and verify its signatures.

URL is the card's address, an agent's base URL (`/.well-known/agent-card.json`
is appended), or a local JSON file. Keys, by signature algorithm:

- ES256/384/512, RS256, EdDSA: from `--jwks` (a URL or a file) when given,
  else from the signature's `jku` header, else from the agent's
  `/.well-known/jwks.json`. The key is picked by `kid`. Pass `--jwks` with a
  source you trust: keys named by the card itself only prove that the card and
  the key set come from the same place.
- HS256: the shared secret, from the environment variable named by
  `--secret-env` or from `--secret-file` (never from the command line).

Exit status: 0 a signature verified, 1 none did, 2 the card or keys could not be read
(DNS failure, refused connection, timeout, HTTP error, not JSON, too large; one line
on stderr says which).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from service.signing import (
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
SECRET_HINT = "pass the shared secret with --secret-env NAME or --secret-file FILE"


class FetchError(Exception):
    pass


def add_parser(sub: argparse._SubParsersAction) -> None:
    card = sub.add_parser("card", help="agent card tools (verify signatures)",
                          description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    card_sub = card.add_subparsers(dest="card_command", required=True)
    verify = card_sub.add_parser("verify", help="fetch a card and verify its signatures",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verify.add_argument("url", help="card URL, agent base URL, or a local card JSON file")
    verify.add_argument("--jwks", metavar="URL_OR_FILE", help="trusted JWK Set with the public keys")
    verify.add_argument("--secret-env", metavar="NAME", help="environment variable holding the HS256 secret")
    verify.add_argument("--secret-file", metavar="FILE", help="file holding the HS256 secret")
    verify.add_argument("--algorithms", default=",".join(ASYMMETRIC_ALGS),
                        help="comma-separated allowlist (default: %(default)s; HS256 is added "
                             "when a secret is given)")


def _card_url(target: str) -> str:
    parts = urllib.parse.urlsplit(target)
    if parts.path in ("", "/"):
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, WELL_KNOWN_CARD, "", ""))
    return target


def fetch_json(source: str) -> Any:
    """A JSON document from an http(s) URL or a local file."""
    try:
        if source.startswith(("http://", "https://")):
            request = urllib.request.Request(source, headers={"Accept": "application/json"})
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
                data = response.read(MAX_DOCUMENT_BYTES + 1)
        else:
            data = pathlib.Path(source).read_bytes()[: MAX_DOCUMENT_BYTES + 1]
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{source}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        # DNS failure, refused connection, timeout, a bad URL, a broken response
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise FetchError(f"{source}: cannot read it ({reason})") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise FetchError(f"{source}: larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise FetchError(f"{source}: not JSON") from None


class KeyFinder:
    """Picks the key for a signature's protected header; remembers where keys came from."""

    def __init__(self, card_url: str, jwks_source: str | None, secret: bytes | None) -> None:
        self.card_url = card_url
        self.jwks_source = jwks_source
        self.secret = secret
        self.sources: list[str] = []
        self.unreadable: list[str] = []  # key sources that could not be read (exit status 2)
        self._sets: dict[str, list[SigningKey]] = {}

    def _default_jwks(self) -> str:
        parts = urllib.parse.urlsplit(self.card_url)
        if parts.scheme not in ("http", "https"):
            raise SigningError("no key source: pass --jwks (the card was read from a file)")
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, DEFAULT_JWKS_PATH, "", ""))

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
            self.sources.append("the shared secret")
            return SigningKey(kid=str(kid), alg="HS256", secret=self.secret)
        jku = header.get("jku")
        source = self.jwks_source or (jku if isinstance(jku, str) and jku else None) or self._default_jwks()
        for key in self._keys(source):
            if key.kid == kid:
                self.sources.append(source)
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
            return pathlib.Path(args.secret_file).read_bytes().rstrip(b"\r\n")
        except OSError as exc:
            raise FetchError(f"--secret-file: cannot read it ({exc.strerror})") from None
    return None


def _has_hs256(card: dict[str, Any]) -> bool:
    """Whether a signature of the card says HS256 (needs the shared secret to check)."""
    signatures = card.get("signatures")
    for sig in signatures if isinstance(signatures, list) else []:
        try:
            if isinstance(sig, dict) and decode_header(sig.get("protected")).get("alg") == "HS256":
                return True
        except SigningError:
            continue
    return False


def main(args: argparse.Namespace) -> int:
    if args.card_command != "verify":  # pragma: no cover - argparse allows only verify
        return 2
    try:
        secret = _read_secret(args)
        url = _card_url(args.url) if args.url.startswith(("http://", "https://")) else args.url
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
    finder = KeyFinder(url, args.jwks, secret)
    try:
        verified = verify_card_json(card, finder, algorithms=algorithms)
    except SigningError as exc:
        if finder.unreadable:  # no signature verified and keys could not be read: exit 2
            print(f"error: {finder.unreadable[0]}", file=sys.stderr)
            return 2
        hint = f" (HS256: {SECRET_HINT})" if secret is None and _has_hs256(card) and SECRET_HINT not in str(exc) else ""
        print(f"NOT VERIFIED: {url}: {exc}{hint}", file=sys.stderr)
        return 1
    source = finder.sources[-1] if finder.sources else "?"
    print(f"verified: {url}: signature by kid {verified.kid!r} ({verified.alg}), key from {source}")
    return 0
