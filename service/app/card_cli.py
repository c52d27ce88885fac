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
import os
import sys
from typing import Any, Protocol

from a2a_cards.fetch import FetchError, card_url, fetch_json, is_http, read_document
from a2a_cards.finder import SECRET_HINT, KeyFinder
from a2a_cards.jws import decode_header, verify_card_json
from a2a_cards.keys import ASYMMETRIC_ALGS, SigningError

NOT_PINNED = "not from a key you pinned with --jwks"


class Subcommands(Protocol):
    """What `add_parser` needs of `ArgumentParser.add_subparsers()`: adding one subcommand."""

    def add_parser(
        self,
        name: str,
        *,
        help: str | None = ...,
        description: str | None = ...,
        formatter_class: type[argparse.HelpFormatter] = ...,
    ) -> argparse.ArgumentParser: ...


def add_parser(sub: Subcommands) -> None:
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
        url = card_url(args.url) if is_http(args.url) else args.url
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
