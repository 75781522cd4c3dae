"""OIDC tokens for authenticated push, and the key set that verifies them. Pure (no I/O).

A token is an RS256 JWT whose header names the signing key (`kid`) and whose claims are those
Pub/Sub sends: iss, aud, azp, sub, email, email_verified, iat and exp (one hour after iat).
Tokens are cached per (audience, service account) and reused until five minutes before expiry.
The public halves of the keys are published as a JWK set (RFC 7517); a key's id is its RFC 7638
thumbprint.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Sequence

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

TOKEN_LIFETIME = 3600
REFRESH_BEFORE = 300  # a cached token is replaced this long before it expires
SETTLE_MS = 30_000  # a new key signs only once every process has had time to publish it
CERTS_PATH = "/oauth2/v3/certs"
OPENID_PATH = "/.well-known/openid-configuration"


@dataclasses.dataclass(frozen=True, slots=True)
class SigningKey:
    kid: str
    private_key: rsa.RSAPrivateKey
    created_ms: int


def _b64url_uint(n: int) -> str:
    raw = n.to_bytes((n.bit_length() + 7) // 8 or 1, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _public_numbers(key: rsa.RSAPrivateKey) -> dict[str, str]:
    numbers = key.public_key().public_numbers()
    return {"e": _b64url_uint(numbers.e), "kty": "RSA", "n": _b64url_uint(numbers.n)}


def thumbprint(key: rsa.RSAPrivateKey) -> str:
    """RFC 7638 JWK thumbprint (SHA-256) of the public key, base64url without padding."""
    canonical = json.dumps(_public_numbers(key), separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()


def new_key(now_ms: int) -> SigningKey:
    """A fresh 2048-bit RSA key (tens of milliseconds of CPU: call it off the event loop)."""
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return SigningKey(thumbprint(private), private, now_ms)


def key_from_pem(pem: bytes, created_ms: int = 0) -> SigningKey:
    private = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(private, rsa.RSAPrivateKey):
        raise ValueError("the push signing key must be an RSA private key")
    return SigningKey(thumbprint(private), private, created_ms)


def encode_key(key: SigningKey) -> bytes:
    """A key as stored in the key topic: JSON with the private key as PKCS#8 PEM."""
    pem = key.private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return json.dumps({"kid": key.kid, "created_ms": key.created_ms, "pem": pem.decode()}).encode()


def decode_key(value: bytes) -> SigningKey:
    d = json.loads(value)
    key = key_from_pem(d["pem"].encode(), int(d["created_ms"]))
    if key.kid != d["kid"]:
        raise ValueError(f"stored key id {d['kid']!r} does not match its key")
    return key


def public_jwk(key: SigningKey) -> dict[str, str]:
    return {**_public_numbers(key.private_key), "kid": key.kid, "alg": "RS256", "use": "sig"}


def jwks(keys: Sequence[SigningKey]) -> dict[str, list[dict[str, str]]]:
    return {"keys": [public_jwk(k) for k in sorted(keys, key=lambda k: -k.created_ms)]}


def openid_configuration(issuer: str) -> dict[str, object]:
    base = issuer.rstrip("/")
    return {
        "issuer": issuer,
        "jwks_uri": base + CERTS_PATH,
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "claims_supported": ["aud", "azp", "email", "email_verified", "exp", "iat", "iss", "sub"],
    }


def signing_key(keys: Sequence[SigningKey], now_ms: int) -> SigningKey | None:
    """The newest key old enough to be published by every process; the newest if none is."""
    if not keys:
        return None
    by_age = sorted(keys, key=lambda k: k.created_ms, reverse=True)
    settled = [k for k in by_age if now_ms - k.created_ms >= SETTLE_MS]
    return settled[0] if settled else by_age[0]


def claims(issuer: str, audience: str, email: str, now: int) -> dict[str, object]:
    return {
        "iss": issuer,
        "aud": audience,
        "azp": email,
        "sub": email,
        "email": email,
        "email_verified": True,
        "iat": now,
        "exp": now + TOKEN_LIFETIME,
    }


class TokenSigner:
    """Signs push tokens with the current key; one cached token per (audience, email)."""

    def __init__(
        self, keys: Callable[[], Sequence[SigningKey]], issuer: str, clock: Callable[[], float] = time.time
    ) -> None:
        self._keys = keys
        self.issuer = issuer
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[str, int]] = {}

    def token(self, audience: str, email: str) -> str:
        """A valid token; raises LookupError while no signing key is loaded."""
        now = int(self._clock())
        cached = self._cache.get((audience, email))
        if cached is not None and cached[1] - now > REFRESH_BEFORE:
            return cached[0]
        key = signing_key(self._keys(), now * 1000)
        if key is None:
            raise LookupError("no push signing key is loaded yet")
        body = claims(self.issuer, audience, email, now)
        token = jwt.encode(body, key.private_key, algorithm="RS256", headers={"kid": key.kid})
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[(audience, email)] = (token, now + TOKEN_LIFETIME)
        return token
