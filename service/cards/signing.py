"""Agent card signing (A2A spec §8.4): JWS over the RFC 8785 canonical card.

The payload is the card as ProtoJSON (camelCase, proto3 presence: unset fields
are absent), without `signatures`, with empty strings, arrays and objects left
out, serialized by RFC 8785 (JCS). That is the form the a2a-sdk verifier
rebuilds from a received card, so its `create_signature_verifier` accepts our
signatures. The JWS is detached: a card carries `{protected, signature}`,
where `protected` is the base64url header `{"alg", "typ": "JOSE", "kid"[, "jku"]}`
and the signature covers `protected || "." || base64url(payload)`.

Keys: HS256 with a shared secret, or ES256 / ES384 / ES512 / RS256 / EdDSA from
PEM keys (the algorithm follows from the key). Several PEM keys can be
configured for rotation: the first signs, all of them are published as a JWKS.
ECDSA signatures are deterministic (RFC 6979), so every replica serves the
same bytes and the same ETag for the same card.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import pathlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import rfc8785
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from google.protobuf import json_format

from gen import a2a_pb2 as pb
from service.cards.card import Cards
from service.setting import setting

JWS_TYPE = "JOSE"
HS256_MIN_SECRET_BYTES = 32  # RFC 7518 §3.2: a key at least as long as the hash output
DEFAULT_JWKS_PATH = "/.well-known/jwks.json"
ASYMMETRIC_ALGS = ("ES256", "ES384", "ES512", "RS256", "EdDSA")
_EC_ALGS = {
    "secp256r1": ("ES256", "P-256", hashes.SHA256, 32),
    "secp384r1": ("ES384", "P-384", hashes.SHA384, 48),
    "secp521r1": ("ES512", "P-521", hashes.SHA512, 66),
}
_JWK_CURVES: dict[str, Callable[[], ec.EllipticCurve]] = {
    "P-256": ec.SECP256R1,
    "P-384": ec.SECP384R1,
    "P-521": ec.SECP521R1,
}


class SigningError(ValueError):
    """A key or signature that cannot be used; the message says why (never the key)."""


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    if not isinstance(text, str) or any(c in text for c in "=+/ \n"):
        raise SigningError("not base64url text")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, TypeError):
        raise SigningError("not base64url text") from None


# ----------------------------------------------------------------------------- payload


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


def canonical_payload(card: pb.AgentCard) -> bytes:
    """What a card's signatures cover."""
    return canonical_json(json_format.MessageToDict(card))


# ----------------------------------------------------------------------------- keys


@dataclass(frozen=True)
class SigningKey:
    """One key: `private` signs (None for a published-only older key), `public` verifies."""

    kid: str
    alg: str
    private: Any = None
    public: Any = None
    secret: bytes = field(default=b"", repr=False)

    @property
    def can_sign(self) -> bool:
        return self.private is not None or bool(self.secret)

    def public_jwk(self) -> dict[str, str] | None:
        """The JWK clients verify with; None for a shared secret (never published)."""
        if self.secret:
            return None
        jwk = public_jwk(self.public)
        jwk.update(kid=self.kid, alg=self.alg, use="sig")
        return jwk


def _int_b64(n: int, size: int | None = None) -> str:
    length = size if size is not None else max(1, (n.bit_length() + 7) // 8)
    return b64url(n.to_bytes(length, "big"))


def public_jwk(key: object) -> dict[str, str]:
    """The members of a public key's JWK (RFC 7517/7518/8037), without kid/alg/use."""
    if isinstance(key, ec.EllipticCurvePublicKey):
        alg_info = _EC_ALGS.get(key.curve.name)
        if alg_info is None:
            raise SigningError(
                f"EC curve {key.curve.name} is not supported; use P-256, P-384 or P-521"
            )
        numbers = key.public_numbers()
        size = alg_info[3]
        return {
            "kty": "EC",
            "crv": alg_info[1],
            "x": _int_b64(numbers.x, size),
            "y": _int_b64(numbers.y, size),
        }
    if isinstance(key, rsa.RSAPublicKey):
        rsa_numbers = key.public_numbers()
        return {"kty": "RSA", "n": _int_b64(rsa_numbers.n), "e": _int_b64(rsa_numbers.e)}
    if isinstance(key, ed25519.Ed25519PublicKey):
        raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}
    raise SigningError("unsupported key type; use an EC (P-256/384/521), RSA or Ed25519 key")


def thumbprint(jwk: Mapping[str, str]) -> str:
    """RFC 7638 JWK thumbprint (SHA-256, base64url): the default key id."""
    members = {"EC": ("crv", "kty", "x", "y"), "RSA": ("e", "kty", "n"), "OKP": ("crv", "kty", "x")}
    required = members[jwk["kty"]]
    text = json.dumps({k: jwk[k] for k in required}, separators=(",", ":"), sort_keys=True)
    return b64url(hashlib.sha256(text.encode()).digest())


def alg_for(public: object) -> str:
    if isinstance(public, ec.EllipticCurvePublicKey):
        info = _EC_ALGS.get(public.curve.name)
        if info is None:
            raise SigningError(
                f"EC curve {public.curve.name} is not supported; use P-256, P-384 or P-521"
            )
        return info[0]
    if isinstance(public, rsa.RSAPublicKey):
        if public.key_size < 2048:
            raise SigningError(
                f"RSA keys must have at least 2048 bits (this one has {public.key_size})"
            )
        return "RS256"
    if isinstance(public, ed25519.Ed25519PublicKey):
        return "EdDSA"
    raise SigningError("unsupported key type; use an EC (P-256/384/521), RSA or Ed25519 key")


def key_from_pem(data: bytes, kid: str = "", *, require_private: bool = False) -> SigningKey:
    """A SigningKey from PEM text: a private key (signs and publishes) or a public one."""
    private = public = None
    if b"PRIVATE KEY" in data:
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except TypeError:
            raise SigningError(
                "encrypted PEM keys are not supported; store the key unencrypted "
                "with restrictive file permissions"
            ) from None
        except ValueError:
            raise SigningError("not a readable PEM private key") from None
        public = private.public_key()
    elif require_private:
        raise SigningError("the signing key must be a PEM private key")
    else:
        try:
            public = serialization.load_pem_public_key(data)
        except ValueError:
            raise SigningError("not a readable PEM public or private key") from None
    alg = alg_for(public)
    return SigningKey(
        kid=kid or thumbprint(public_jwk(public)), alg=alg, private=private, public=public
    )


def key_from_secret(secret: bytes, kid: str) -> SigningKey:
    if len(secret) < HS256_MIN_SECRET_BYTES:
        raise SigningError(f"an HS256 secret must be at least {HS256_MIN_SECRET_BYTES} bytes long")
    return SigningKey(kid=kid, alg="HS256", secret=secret)


def key_from_jwk(jwk: Mapping[str, Any]) -> SigningKey:
    """A verification key from a public JWK (as published in a JWKS)."""
    try:
        kty = jwk["kty"]
        if kty == "EC":
            curve_cls = _JWK_CURVES.get(jwk["crv"])
            if curve_cls is None:
                raise SigningError(f"unsupported EC curve {jwk['crv']!r}")
            curve = curve_cls()
            x = int.from_bytes(b64url_decode(jwk["x"]), "big")
            y = int.from_bytes(b64url_decode(jwk["y"]), "big")
            public: Any = ec.EllipticCurvePublicNumbers(x, y, curve).public_key()
        elif kty == "RSA":
            n = int.from_bytes(b64url_decode(jwk["n"]), "big")
            e = int.from_bytes(b64url_decode(jwk["e"]), "big")
            public = rsa.RSAPublicNumbers(e, n).public_key()
        elif kty == "OKP" and jwk.get("crv") == "Ed25519":
            public = ed25519.Ed25519PublicKey.from_public_bytes(b64url_decode(jwk["x"]))
        else:
            raise SigningError(f"unsupported JWK key type {kty!r}")
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SigningError):
            raise
        raise SigningError("malformed JWK") from None
    alg = alg_for(public)
    if jwk.get("alg") and jwk["alg"] != alg:
        raise SigningError(f"the JWK says alg {jwk['alg']!r} but its key is for {alg}")
    kid = jwk.get("kid") if isinstance(jwk.get("kid"), str) else ""
    return SigningKey(kid=kid or thumbprint(public_jwk(public)), alg=alg, public=public)


# ----------------------------------------------------------------------------- JWS


def _ecdsa_sign(
    private: ec.EllipticCurvePrivateKey, data: bytes, hash_algorithm: hashes.HashAlgorithm
) -> bytes:
    """RFC 6979 (deterministic) ECDSA where cryptography/OpenSSL offer it; randomized otherwise."""
    try:
        return private.sign(data, ec.ECDSA(hash_algorithm, deterministic_signing=True))
    except (TypeError, UnsupportedAlgorithm):  # cryptography < 44 or OpenSSL < 3.2
        return private.sign(data, ec.ECDSA(hash_algorithm))


def _sign_bytes(key: SigningKey, data: bytes) -> bytes:
    if key.alg == "HS256":
        return hmac.new(key.secret, data, hashlib.sha256).digest()
    if key.private is None:
        raise SigningError(f"key {key.kid} has no private part; it can only verify")
    if key.alg == "RS256":
        return key.private.sign(data, padding.PKCS1v15(), hashes.SHA256())
    if key.alg == "EdDSA":
        return key.private.sign(data)
    _, _, hash_cls, size = _EC_ALGS[key.private.curve.name]
    der = _ecdsa_sign(key.private, data, hash_cls())
    r, s = decode_dss_signature(der)
    return r.to_bytes(size, "big") + s.to_bytes(size, "big")  # JWS wants R || S (RFC 7518 §3.4)


def _verify_bytes(key: SigningKey, data: bytes, signature: bytes) -> bool:
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
            _, _, hash_cls, size = _EC_ALGS[key.public.curve.name]
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


def sign_payload(payload: bytes, key: SigningKey, jku: str = "") -> pb.AgentCardSignature:
    protected = protected_header(key, jku)
    signature = _sign_bytes(key, f"{protected}.{b64url(payload)}".encode("ascii"))
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


# ----------------------------------------------------------------------------- verification


@dataclass(frozen=True)
class Verified:
    kid: str
    alg: str
    form: str  # which payload form matched: "a2a-sdk" (empties left out) or "as served"


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
            if _verify_bytes(key, f"{sig['protected']}.{b64url(payload)}".encode("ascii"), raw_sig):
                return Verified(kid=str(header.get("kid", "")), alg=alg, form=form)
        problems.append(
            f"{where}: the signature does not match the card (kid {header.get('kid')!r})"
        )
    raise SigningError("; ".join(problems))


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
    """Agent card signing keys and where their public half is served (README "Agent card signing")."""

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
