"""The token that marks an ack or modack as forwarded by another gateway process.

A process that receives ack ids of a partition it does not own forwards them to the owner
(gateway/wire/peers.py), marked so that the owner neither forwards them again nor asks the
caller's credentials a second time: the process that took the call checked them. The mark
must not be something a client can set. It is an RS256 JWT signed with the keys every process
already shares through Kafka for push tokens (gateway/push/keystore.py), scoped to one
subscription and valid for a few minutes:

    {"iss": "pubsub-gateway", "aud": "pubsub-gateway-peer", "sub": <subscription>, "iat", "exp"}

Without TLS a token seen on the network could be replayed for that subscription's acks until it
expires (docs/security.md): give the gateways TLS where that network is not trusted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

ISSUER = "pubsub-gateway"
AUDIENCE = "pubsub-gateway-peer"
LIFETIME = 600
RENEW_AFTER = 300
LEEWAY = 30  # seconds the processes' clocks may differ
SETTLE_MS = 30_000  # as push tokens: a new key signs once every process has had time to load it
CACHE_LIMIT = 10_000


class Key(Protocol):
    @property
    def kid(self) -> str: ...
    @property
    def private_key(self) -> rsa.RSAPrivateKey: ...
    @property
    def created_ms(self) -> int: ...


def _signing_key(keys: Sequence[Key], now_ms: int) -> Key:
    """The newest key every process has had time to load (a key made a moment ago elsewhere
    may not have reached the owner yet); the newest if none is that old."""
    by_age = sorted(keys, key=lambda k: k.created_ms, reverse=True)
    settled = [k for k in by_age if now_ms - k.created_ms >= SETTLE_MS]
    return settled[0] if settled else by_age[0]


class PeerTokens:
    """Mints the mark for a subscription (cached) and verifies marks received."""

    def __init__(self, keys: Callable[[], Sequence[Key]], clock: Callable[[], float] = time.time) -> None:
        self._keys = keys
        self._clock = clock
        self._minted: dict[str, tuple[str, int]] = {}  # subscription -> (token, iat)
        self._verified: dict[tuple[str, str], int] = {}  # (token, subscription) -> exp

    def token(self, subscription: str) -> str:
        """A valid mark; LookupError while no key is loaded (the forward then fails, retryably)."""
        now = int(self._clock())
        cached = self._minted.get(subscription)
        if cached is not None and now - cached[1] < RENEW_AFTER:
            return cached[0]
        keys = self._keys()
        if not keys:
            raise LookupError("no gateway key is loaded yet")
        key = _signing_key(keys, now * 1000)
        claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": subscription, "iat": now, "exp": now + LIFETIME}
        token = jwt.encode(claims, key.private_key, algorithm="RS256", headers={"kid": key.kid})
        if len(self._minted) >= CACHE_LIMIT:
            self._minted.clear()
        self._minted[subscription] = (token, now)
        return token

    def verify(self, token: str, subscription: str) -> bool:
        """Whether `token` is a mark some gateway process made for `subscription`, unexpired."""
        now = int(self._clock())
        exp = self._verified.get((token, subscription))
        if exp is not None:
            return now < exp
        try:
            kid = jwt.get_unverified_header(token).get("kid")
        except jwt.PyJWTError:
            return False
        key = next((k for k in self._keys() if k.kid == kid), None)
        if key is None:
            return False
        try:
            claims = jwt.decode(
                token,
                key.private_key.public_key(),
                algorithms=["RS256"],
                audience=AUDIENCE,
                issuer=ISSUER,
                # Times are checked below, against this object's clock.
                options={"require": ["exp", "iat", "sub"], "verify_exp": False, "verify_iat": False},
            )
        except jwt.PyJWTError:
            return False
        if claims.get("sub") != subscription:
            return False
        try:
            iat, exp = int(claims["iat"]), int(claims["exp"])
        except (TypeError, ValueError):
            return False
        if not iat - LEEWAY <= now < exp or exp - iat > LIFETIME:
            return False
        if len(self._verified) >= CACHE_LIMIT:
            self._verified.clear()
        self._verified[(token, subscription)] = exp
        return True
