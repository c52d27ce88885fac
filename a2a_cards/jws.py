"""Detached JWS over the RFC 8785 canonical card (A2A spec §8.4): what a signature covers,
making one, and checking a card's signatures against an allowlist of algorithms.

A card carries `{protected, signature}`, where `protected` is the base64url header
`{"alg", "typ": "JOSE", "kid"[, "jku"]}` and the signature covers
`protected || "." || base64url(payload)`; the payload is the card's JSON without
`signatures`, with empty strings, arrays and objects left out (the form the a2a-sdk
verifier rebuilds), serialized by RFC 8785 (JCS). A card that also serves v0.3 clients
(service/cards/v03.py) is signed over its 1.0 members, what 1.0 verifiers rebuild from
the card they parse; its v0.3 members are copies of signed ones.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from google.protobuf import json_format

from a2a_cards.keys import EC_ALGS, SigningError, SigningKey, b64url, b64url_decode
from gen import a2a_pb2 as pb

JWS_TYPE = "JOSE"


def _drop_empty(value: Any) -> Any:
    """Recursively leave out "", [] and {} (None when nothing is left)."""
    if isinstance(value, dict):
        kept = {k: v for k, v in ((k, _drop_empty(v)) for k, v in value.items()) if v is not None}
        return kept or None
    if isinstance(value, list):
        items = [v for v in (_drop_empty(v) for v in value) if v is not None]
        return items or None
    if isinstance(value, str) and not value:
        return None
    return value


def canonical_json(document: Mapping[str, Any], *, drop_empty: bool = True) -> bytes:
    """RFC 8785 bytes of a card's JSON object, without `signatures`."""
    doc = {k: v for k, v in document.items() if k != "signatures"}
    if drop_empty:
        doc = _drop_empty(doc) or {}
    return rfc8785.dumps(doc)


def v10_members(document: Mapping[str, Any]) -> bytes | None:
    """The canonical payload of the card's 1.0 members only, as a 1.0 verifier rebuilds it
    from the card it parsed (a2a-sdk's does): a card that also serves v0.3 clients carries
    v0.3 members beside them (copies of signed ones), which this form leaves out. None
    when the document is no AgentCard."""
    card = pb.AgentCard()
    try:
        json_format.ParseDict(dict(document), card, ignore_unknown_fields=True)
    except (json_format.ParseError, TypeError, ValueError, AttributeError):
        return None
    return canonical_json(json_format.MessageToDict(card))


def _ecdsa_sign(
    private: ec.EllipticCurvePrivateKey, data: bytes, hash_algorithm: hashes.HashAlgorithm
) -> bytes:
    """RFC 6979 (deterministic) ECDSA where cryptography/OpenSSL offer it; randomized otherwise."""
    try:
        return private.sign(data, ec.ECDSA(hash_algorithm, deterministic_signing=True))
    except (TypeError, UnsupportedAlgorithm):  # cryptography < 44 or OpenSSL < 3.2
        return private.sign(data, ec.ECDSA(hash_algorithm))


def sign_bytes(key: SigningKey, data: bytes) -> bytes:
    if key.alg == "HS256":
        return hmac.new(key.secret, data, hashlib.sha256).digest()
    if key.private is None:
        raise SigningError(f"key {key.kid} has no private part; it can only verify")
    signature: bytes  # the keys are typed Any (SigningKey holds any of the key classes)
    if key.alg == "RS256":
        signature = key.private.sign(data, padding.PKCS1v15(), hashes.SHA256())
        return signature
    if key.alg == "EdDSA":
        signature = key.private.sign(data)
        return signature
    _, _, hash_cls, size = EC_ALGS[key.private.curve.name]
    der = _ecdsa_sign(key.private, data, hash_cls())
    r, s = decode_dss_signature(der)
    return r.to_bytes(size, "big") + s.to_bytes(size, "big")  # JWS wants R || S (RFC 7518 §3.4)


def verify_bytes(key: SigningKey, data: bytes, signature: bytes) -> bool:
    try:
        if key.alg == "HS256":
            return bool(key.secret) and hmac.compare_digest(
                hmac.new(key.secret, data, hashlib.sha256).digest(), signature
            )
        if key.alg == "RS256":
            key.public.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
        elif key.alg == "EdDSA":
            key.public.verify(signature, data)
        else:
            _, _, hash_cls, size = EC_ALGS[key.public.curve.name]
            if len(signature) != 2 * size:
                return False
            der = encode_dss_signature(
                int.from_bytes(signature[:size], "big"), int.from_bytes(signature[size:], "big")
            )
            key.public.verify(der, data, ec.ECDSA(hash_cls()))
    except InvalidSignature:
        return False
    return True


def protected_header(key: SigningKey, jku: str = "") -> str:
    header = {"alg": key.alg, "typ": JWS_TYPE, "kid": key.kid}
    if jku:
        header["jku"] = jku
    return b64url(json.dumps(header, separators=(",", ":")).encode())


@dataclass(frozen=True)
class Verified:
    kid: str
    alg: str
    # which payload form matched: "a2a-sdk" (empties left out), "as served", or "1.0 members"
    form: str


def decode_header(protected: str) -> dict[str, Any]:
    try:
        header = json.loads(b64url_decode(protected))
    except (SigningError, ValueError, UnicodeDecodeError):
        raise SigningError("the protected header is not base64url JSON") from None
    if not isinstance(header, dict):
        raise SigningError("the protected header is not a JSON object")
    return header


def verify_card_json(
    document: Mapping[str, Any],
    find_key: Callable[[dict[str, Any]], SigningKey | None],
    *,
    algorithms: Iterable[str],
) -> Verified:
    """Check the signatures of a card (as JSON) until one verifies.

    `find_key(header) -> SigningKey | None` picks the key for a protected header
    (by `kid`, `jku`, `alg`); `algorithms` is the allowlist. Raises SigningError
    naming why no signature verified.
    """
    allowed = set(algorithms)
    signatures = document.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise SigningError("the card has no signatures")
    forms = {
        "a2a-sdk": canonical_json(document),
        "as served": canonical_json(document, drop_empty=False),
    }
    members = v10_members(document)
    if members is not None:
        forms["1.0 members"] = members
    problems: list[str] = []
    for i, sig in enumerate(signatures):
        where = f"signatures[{i}]"
        if (
            not isinstance(sig, dict)
            or not isinstance(sig.get("protected"), str)
            or not isinstance(sig.get("signature"), str)
        ):
            problems.append(f"{where}: needs string members 'protected' and 'signature'")
            continue
        try:
            header = decode_header(sig["protected"])
            raw_sig = b64url_decode(sig["signature"])
        except SigningError as exc:
            problems.append(f"{where}: {exc}")
            continue
        alg = header.get("alg")
        if alg not in allowed:
            problems.append(
                f"{where}: algorithm {alg!r} is not allowed (allowed: {', '.join(sorted(allowed))})"
            )
            continue
        try:
            key = find_key(header)
        except SigningError as exc:
            problems.append(f"{where}: {exc}")
            continue
        if key is None:
            problems.append(f"{where}: no key for kid {header.get('kid')!r}")
            continue
        if key.alg != alg:
            problems.append(f"{where}: header alg {alg} does not match the key's {key.alg}")
            continue
        for form, payload in forms.items():
            if verify_bytes(key, f"{sig['protected']}.{b64url(payload)}".encode("ascii"), raw_sig):
                return Verified(kid=str(header.get("kid", "")), alg=alg, form=form)
        problems.append(
            f"{where}: the signature does not match the card (kid {header.get('kid')!r})"
        )
    raise SigningError("; ".join(problems))
