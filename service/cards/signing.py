"""Agent card signing (A2A spec §8.4): the server's side, JWS over the RFC 8785 canonical card.

The keys and the JWS itself live in `a2a_cards` (shared with the `a2a-call` client, which
verifies with them); here are what a served card's signatures cover, the signer of the
public and extended cards with its JWKS, and the card_signing_* settings.

Keys: HS256 with a shared secret, or ES256 / ES384 / ES512 / RS256 / EdDSA from
PEM keys (the algorithm follows from the key). Several PEM keys can be
configured for rotation: the first signs, all of them are published as a JWKS.
ECDSA signatures are deterministic (RFC 6979), so every replica serves the
same bytes and the same ETag for the same card.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from a2a_cards.fetch import DEFAULT_JWKS_PATH
from a2a_cards.jws import canonical_json, protected_header, sign_bytes
from a2a_cards.keys import (
    SigningError,
    SigningKey,
    b64url,
    key_from_pem,
    key_from_secret,
)
from gen import a2a_pb2 as pb
from service.cards.card import Cards
from service.setting import setting


def canonical_payload(card: pb.AgentCard) -> bytes:
    """What a card's signatures cover."""
    return canonical_json(json_format.MessageToDict(card))


# ----------------------------------------------------------------------------- signing


def sign_payload(payload: bytes, key: SigningKey, jku: str = "") -> pb.AgentCardSignature:
    protected = protected_header(key, jku)
    signature = sign_bytes(key, f"{protected}.{b64url(payload)}".encode("ascii"))
    return pb.AgentCardSignature(protected=protected, signature=b64url(signature))


class CardSigner:
    """Signs cards with the current asymmetric key and/or the HS256 secret; publishes the JWKS."""

    def __init__(
        self, keys: Iterable[SigningKey], *, secret_key: SigningKey | None = None, jku: str = ""
    ) -> None:
        self.keys = list(keys)  # [current, older...]; older ones are only published
        if self.keys and not self.keys[0].can_sign:
            raise SigningError("the first (current) key must be a private key")
        self.secret_key = secret_key
        self.jku = jku if self.keys else ""

    @property
    def signing_keys(self) -> list[SigningKey]:
        return ([self.keys[0]] if self.keys else []) + (
            [self.secret_key] if self.secret_key else []
        )

    def sign(self, card: pb.AgentCard) -> pb.AgentCard:
        """A copy of the card whose `signatures` are ours (any earlier ones replaced)."""
        signed = pb.AgentCard()
        signed.CopyFrom(card)
        del signed.signatures[:]
        payload = canonical_payload(signed)
        for key in self.signing_keys:
            jku = self.jku if key is not self.secret_key else ""
            signed.signatures.append(sign_payload(payload, key, jku))
        return signed

    def jwks(self) -> dict[str, list[dict[str, str]]]:
        return {"keys": [jwk for jwk in (k.public_jwk() for k in self.keys) if jwk is not None]}


class SignedCards:
    """A CardBuilder whose public and extended cards come out signed."""

    def __init__(self, builder: Cards, signer: CardSigner) -> None:
        self.builder = builder
        self.signer = signer
        self._cache: dict[bytes, pb.AgentCard] = {}

    def _sign(self, card: pb.AgentCard) -> pb.AgentCard:
        payload = card.SerializeToString(deterministic=True)
        signed = self._cache.get(payload)
        if signed is None:
            if len(self._cache) >= 64:
                self._cache.clear()
            signed = self._cache[payload] = self.signer.sign(card)
        out = pb.AgentCard()
        out.CopyFrom(signed)
        return out

    def public_card(self) -> pb.AgentCard:
        return self._sign(self.builder.public_card())

    def extended_card(self) -> pb.AgentCard:
        return self._sign(self.builder.extended_card())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.builder, name)


# ----------------------------------------------------------------------------- settings


def _read_secret_file(path: str, key: str) -> bytes:
    try:
        return pathlib.Path(path).read_bytes().rstrip(b"\r\n")
    except OSError as exc:
        raise SigningError(f"{key}: cannot read {path!r} ({exc.strerror})") from None


def split_key_entry(entry: str) -> tuple[str, str]:
    """`KID=PATH` or `PATH` -> (kid or "", path); a path may itself contain '='."""
    kid, sep, path = entry.partition("=")
    if not sep or "/" in kid or os.sep in kid or not kid.strip():
        return "", entry.strip()
    return kid.strip(), path.strip()


@dataclass
class SigningSettings:
    """Agent card signing keys and where their public half is served ([Security: agent card signing](security.md#agent-card-signing))."""

    card_signing_key_files: list[str] = setting(
        [],
        "PEM key files, each `PATH` or `KID=PATH`: the first (a private key) signs the "
        "cards, all are published in the JWKS (rotation; older ones may be public keys). "
        "Default kid: the RFC 7638 thumbprint",
    )
    card_signing_secret: str = setting(
        "",
        "HS256 secret (≥ 32 bytes) for card signatures. Secret: file or environment only",
        secret=True,
    )
    card_signing_secret_file: str = setting("", "a file holding that secret instead")
    card_signing_secret_kid: str = setting("", "`kid` of the HS256 signature", shown="`hs256`")
    card_signing_jku: str = setting(
        "",
        "`jku` in the signature header: empty = the gateway's base URL (`public_url`, or "
        "`http(s)://host:port`) + `card_jwks_path` (with PEM keys), `none` = left out, or"
        " a URL",
        shown="the served JWKS URL",
    )
    card_jwks_path: str = setting(
        "/.well-known/jwks.json",
        "where the gateway serves the public signing keys (empty: not served)",
    )


def secret_files(s: SigningSettings) -> list[str]:
    """Files of this section that hold keys or secrets (no message may point at them)."""
    paths = [split_key_entry(entry)[1] for entry in s.card_signing_key_files]
    return paths + ([s.card_signing_secret_file] if s.card_signing_secret_file else [])


def load_keys(s: SigningSettings) -> tuple[list[SigningKey], SigningKey | None]:
    """(PEM keys, current first; the HS256 key or None) from the card_signing_* settings."""
    keys: list[SigningKey] = []
    for i, entry in enumerate(s.card_signing_key_files):
        kid, path = split_key_entry(entry)
        try:
            data = pathlib.Path(path).read_bytes()
        except OSError as exc:
            raise SigningError(
                f"card_signing_key_files[{i}]: cannot read {path!r} ({exc.strerror})"
            ) from None
        try:
            keys.append(key_from_pem(data, kid, require_private=i == 0))
        except SigningError as exc:
            raise SigningError(f"card_signing_key_files[{i}]: {exc}") from None
    kids = [k.kid for k in keys]
    if len(set(kids)) != len(kids):
        raise SigningError("card_signing_key_files: two keys have the same kid; give each its own")
    secret = s.card_signing_secret.encode() if s.card_signing_secret else b""
    if s.card_signing_secret_file:
        if secret:
            raise SigningError(
                "card_signing_secret and card_signing_secret_file are both set; keep one"
            )
        secret = _read_secret_file(s.card_signing_secret_file, "card_signing_secret_file")
    secret_key = None
    if secret:
        try:
            secret_key = key_from_secret(secret, s.card_signing_secret_kid or "hs256")
        except SigningError as exc:
            raise SigningError(f"card_signing_secret: {exc}") from None
        if secret_key.kid in kids:
            raise SigningError("card_signing_secret_kid: the same kid as a PEM key; choose another")
    return keys, secret_key


def signing_enabled(s: SigningSettings) -> bool:
    return bool(s.card_signing_key_files or s.card_signing_secret or s.card_signing_secret_file)


def signer_from_settings(s: SigningSettings, http_base: str = "") -> CardSigner | None:
    """The configured signer (None when signing is off). `http_base` is the gateway's base URL
    for the automatic `jku` (the served JWKS)."""
    if not signing_enabled(s):
        return None
    keys, secret_key = load_keys(s)
    jku = s.card_signing_jku
    if jku == "none":
        jku = ""
    elif not jku:
        jku = (
            f"{http_base.rstrip('/')}{s.card_jwks_path}"
            if http_base and s.card_jwks_path and keys
            else ""
        )
    return CardSigner(keys, secret_key=secret_key, jku=jku)


def validate_signing(s: SigningSettings) -> None:
    """Startup checks of the card_signing_* / card_jwks_path settings (ValueError naming the key)."""
    path = s.card_jwks_path
    if path and (
        not path.startswith("/")
        or path in ("/", "/health", "/.well-known/agent-card.json")
        or any(c in path for c in "{}?# ")
    ):
        raise ValueError(
            f"card_jwks_path: {path!r} must be a free absolute path like {DEFAULT_JWKS_PATH} "
            "(or empty to not serve the keys)"
        )
    jku = s.card_signing_jku
    if jku and jku != "none" and not jku.startswith(("https://", "http://")):
        raise ValueError(
            f"card_signing_jku: expected an http(s) URL, 'none', or empty for automatic, got {jku!r}"
        )
    if signing_enabled(s):
        try:
            load_keys(s)
        except SigningError as exc:
            raise ValueError(str(exc)) from None
