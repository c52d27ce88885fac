"""Bearer JWTs verified against a JWKS (RFC 7517 / 7519), for teams with an identity provider.

The key set comes from a local file, a URL, or the `jwks_uri` of an OpenID Connect
discovery document. It is cached for `cache_seconds`; a token whose `kid` is not in
the cache triggers one refetch (keys rotate), at most once per
`min(10 s, cache_seconds)` so random `kid`s cannot make us hammer the provider. A
failed fetch keeps the keys we had.

A token is accepted only if its header `alg` is in the allowlist (asymmetric
algorithms only: a JWKS publishes public keys, and HMAC over a public key is the
classic algorithm-confusion attack), its `kid` selects a signing key (a token
without `kid` is fine when the set has exactly one key), the key's own `alg` (if
any) agrees, the signature verifies, and `iss`, `aud`, `exp` (and `nbf`/`iat` when
present) pass with a small leeway. `exp`, `nbf` and `iat` must be NumericDates (RFC 7519
§2: JSON numbers): PyJWT reads them with int(), which also takes "1767225600" or true,
so a string or a boolean there is refused here. The principal is `jwt:<iss>|<sub>`.

Why a token was refused goes to the debug log only: the client always gets the
same 401.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import math
import time
import urllib.parse
import urllib.request
from typing import Any

import jwt

log = logging.getLogger("service.auth")

SUPPORTED_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
MAX_TOKEN_CHARS = 16 * 1024
MAX_DOCUMENT_BYTES = 1024 * 1024
FETCH_TIMEOUT_SECONDS = 5.0
MAX_UNKNOWN_KID_REFRESH_SECONDS = 10.0


TIME_CLAIMS = ("exp", "nbf", "iat")


def is_numeric_date(value: Any) -> bool:
    """RFC 7519 NumericDate: a JSON number (not a string, not a boolean), finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class JwksError(Exception):
    """The key set could not be loaded (message safe for logs)."""


def check_fetch_url(url: str, key: str) -> str | None:
    """None if `url` may be fetched, else the reason: https, or http to a loopback host."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{key}: expected an absolute https:// URL, got {url!r}"
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        return f"{key}: plain http is allowed only for loopback hosts; use https:// ({url!r})"
    return None


def is_loopback(host: str) -> bool:
    """localhost or a loopback address; '' and 0.0.0.0 / :: (all interfaces) are not."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _fetch_json(url: str) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(
            request, timeout=FETCH_TIMEOUT_SECONDS
        ) as response:  # scheme checked at config time
            body = response.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise JwksError(f"cannot fetch {url}: {getattr(exc, 'reason', None) or exc}") from None
    if len(body) > MAX_DOCUMENT_BYTES:
        raise JwksError(f"{url}: the document is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return json.loads(body)
    except ValueError:
        raise JwksError(f"{url}: not JSON") from None


def read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            body = f.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise JwksError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return json.loads(body)
    except ValueError:
        raise JwksError(f"{path}: not JSON") from None


def signing_keys(document: Any, where: str) -> list[dict[str, Any]]:
    """The usable signing keys of a JWKS document (asymmetric, `use` absent or "sig")."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError(f'{where}: not a JWK set (an object with a "keys" array)')
    keys = []
    for jwk in document["keys"]:
        if not isinstance(jwk, dict) or jwk.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        if jwk.get("use", "sig") != "sig" or ("d" in jwk):
            continue  # encryption keys, and never a private key by mistake
        keys.append(jwk)
    if not keys:
        raise JwksError(f"{where}: the key set has no asymmetric signing keys")
    return keys


class KeySet:
    """A cached JWKS from a file, a URL, or an OpenID Connect discovery document."""

    def __init__(
        self,
        *,
        file: str = "",
        url: str = "",
        discovery_url: str = "",
        cache_seconds: float = 300.0,
    ) -> None:
        self.file, self.url, self.discovery_url = file, url, discovery_url
        self.cache_seconds = cache_seconds
        self.min_refresh = min(MAX_UNKNOWN_KID_REFRESH_SECONDS, cache_seconds)
        self._keys: list[dict[str, Any]] = []
        self._loaded_at = float("-inf")  # last successful load
        self._tried_at = float("-inf")  # last attempt, successful or not
        self._generation = 0
        self._lock = asyncio.Lock()
        self._parsed: dict[tuple[int, int, str], jwt.PyJWK] = {}

    @property
    def where(self) -> str:
        return self.file or self.url or self.discovery_url

    def _load(self) -> list[dict[str, Any]]:
        """Blocking: read or fetch the document (run in a thread)."""
        if self.file:
            return signing_keys(read_json(self.file), self.file)
        url: str | None = self.url
        if not url:
            discovery = _fetch_json(self.discovery_url)
            url = discovery.get("jwks_uri") if isinstance(discovery, dict) else None
            if not isinstance(url, str) or check_fetch_url(url, "jwks_uri"):
                raise JwksError(
                    f"{self.discovery_url}: no usable jwks_uri in the discovery document"
                )
        return signing_keys(_fetch_json(url), url)

    async def refresh(self, seen_generation: int | None = None) -> None:
        async with self._lock:
            if seen_generation is not None and self._generation != seen_generation:
                return  # someone refreshed while we waited
            self._tried_at = time.monotonic()
            try:
                keys = await asyncio.to_thread(self._load)
            except JwksError as exc:
                log.warning("JWKS: %s; keeping %d cached key(s)", exc, len(self._keys))
                return
            self._keys = keys
            self._loaded_at = time.monotonic()
            self._generation += 1
            self._parsed.clear()

    async def prime(self) -> None:
        """Load once at startup; a failure is logged, not fatal (the provider may be back soon)."""
        await self.refresh()

    def _find(self, kid: str | None) -> tuple[int, dict[str, Any]] | None:
        if kid is None:
            return (0, self._keys[0]) if len(self._keys) == 1 else None
        for index, jwk in enumerate(self._keys):
            if jwk.get("kid") == kid:
                return index, jwk
        return None

    async def key(self, kid: str | None, alg: str) -> jwt.PyJWK | None:
        now = time.monotonic()
        if now - self._loaded_at >= self.cache_seconds and now - self._tried_at >= self.min_refresh:
            await self.refresh(self._generation)
        found = self._find(kid)
        if found is None and time.monotonic() - self._tried_at >= self.min_refresh:
            await self.refresh(self._generation)  # maybe a rotated key
            found = self._find(kid)
        if found is None:
            return None
        index, jwk = found
        if jwk.get("alg") not in (None, alg):
            return None
        cache_key = (self._generation, index, alg)
        parsed = self._parsed.get(cache_key)
        if parsed is None:
            try:
                parsed = jwt.PyJWK(jwk, algorithm=alg)
            except jwt.PyJWTError as exc:
                log.debug("JWKS key %r unusable with %s: %s", jwk.get("kid"), alg, exc)
                return None
            self._parsed[cache_key] = parsed
        return parsed


class JwtVerifier:
    def __init__(
        self,
        keys: KeySet,
        *,
        issuer: str,
        audience: list[str],
        algorithms: list[str],
        leeway_seconds: float,
    ) -> None:
        self.keys = keys
        self.issuer = issuer
        self.audience = list(audience)
        self.algorithms = frozenset(algorithms)
        self.leeway = leeway_seconds

    async def principal(self, token: str) -> str | None:
        """`jwt:<iss>|<sub>` for a valid token, else None."""
        if len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
            return None
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in self.algorithms or (kid is not None and not isinstance(kid, str)):
            log.debug("JWT refused: algorithm %r not allowed or bad kid", alg)
            return None
        key = await self.keys.key(kid, alg)
        if key is None:
            log.debug("JWT refused: no signing key for kid %r", kid)
            return None
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            log.debug("JWT refused: %s", exc)
            return None
        for claim in TIME_CLAIMS:
            if claim in claims and not is_numeric_date(claims[claim]):
                log.debug(
                    "JWT refused: %s is %s, not a NumericDate (a JSON number)",
                    claim,
                    type(claims[claim]).__name__,
                )
                return None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            return None
        return f"jwt:{claims['iss']}|{subject}"
