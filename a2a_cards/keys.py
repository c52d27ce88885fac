"""JWS keys of agent card signatures: HS256 shared secrets, and EC (P-256/384/521), RSA and
Ed25519 keys read from PEM or from a published JWK (RFC 7517/7518/8037), with the RFC 7638
thumbprint as the default key id. Moved out of `service.cards.signing` so that the client
verifies cards with the very code the server signs them with.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

HS256_MIN_SECRET_BYTES = 32  # RFC 7518 §3.2: a key at least as long as the hash output
ASYMMETRIC_ALGS = ("ES256", "ES384", "ES512", "RS256", "EdDSA")
# curve name -> (JWS alg, JWK crv, hash, bytes per coordinate); jws.py signs and verifies by it
EC_ALGS: dict[str, tuple[str, str, type[hashes.HashAlgorithm], int]] = {
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
        alg_info = EC_ALGS.get(key.curve.name)
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
        info = EC_ALGS.get(public.curve.name)
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
