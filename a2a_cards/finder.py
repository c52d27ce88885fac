"""Which key checks a signature: a pinned key set (`--jwks`), the shared HS256 secret, the
signature's `jku`, or the agent's own `/.well-known/jwks.json`, picked by `kid`.

A `jku` is used only when it is https:// (or http:// on a loopback host: 127.0.0.0/8,
::1, localhost) and has the card URL's origin (scheme, host and port; loopback names count
as one host); `allow_foreign_jku` lifts the origin rule (not the scheme rule). A card read
from a file has no origin, so its `jku` needs `allow_foreign_jku`. A `jku` is never read as
a local file.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from a2a_cards.fetch import DEFAULT_JWKS_PATH, FetchError, fetch_json, origin_of
from a2a_cards.keys import SigningError, SigningKey, key_from_jwk

SECRET_HINT = "pass the shared secret with --secret-env NAME or --secret-file FILE"


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
        origin = origin_of(self.card_url)
        if origin is None:
            raise SigningError("no key source: pass --jwks (the card was read from a file)")
        parts = urllib.parse.urlsplit(self.card_url)
        return urllib.parse.urlunsplit((parts.scheme, parts.netloc, DEFAULT_JWKS_PATH, "", ""))

    def _check_jku(self, jku: str) -> None:
        """SigningError unless the policy in the module docstring allows fetching this jku."""
        origin = origin_of(jku)
        if origin is None or not (origin[0] == "https" or origin[1] == "loopback"):
            raise SigningError(
                f"jku {jku!r} refused: only https:// (or http:// on a loopback host) "
                f"is fetched; pass --jwks with keys you trust"
            )
        if self.allow_foreign_jku:
            return
        card_origin = origin_of(self.card_url)
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
