"""The mark of forwarded acks: minted by one process, verified by another with the shared keys."""

from __future__ import annotations

import dataclasses

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from gateway.security.peer import AUDIENCE, ISSUER, LIFETIME, RENEW_AFTER, PeerTokens

SUB = "projects/p/subscriptions/s"


@dataclasses.dataclass(frozen=True)
class _Key:
    kid: str
    private_key: rsa.RSAPrivateKey
    created_ms: int


@pytest.fixture(scope="module")
def keys() -> list[_Key]:
    return [
        _Key(f"k{i}", rsa.generate_private_key(public_exponent=65537, key_size=2048), i * 1000)
        for i in range(2)
    ]


class _Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


def test_a_mark_verifies_for_its_subscription_only(keys: list[_Key]) -> None:
    clock = _Clock()
    minting, checking = PeerTokens(lambda: keys, clock), PeerTokens(lambda: keys, clock)
    token = minting.token(SUB)
    assert jwt.get_unverified_header(token)["kid"] == "k1"  # the newest settled key signs
    assert checking.verify(token, SUB)
    assert not checking.verify(token, SUB + "x")
    assert not checking.verify("1", SUB)
    assert not checking.verify("", SUB)


def test_marks_expire_and_are_renewed(keys: list[_Key]) -> None:
    clock = _Clock()
    tokens = PeerTokens(lambda: keys, clock)
    first = tokens.token(SUB)
    clock.now += RENEW_AFTER - 1
    assert tokens.token(SUB) == first
    clock.now += 2
    assert tokens.token(SUB) != first
    assert tokens.verify(first, SUB)  # cached, still within its lifetime
    clock.now += LIFETIME
    assert not tokens.verify(first, SUB)
    assert not PeerTokens(lambda: keys, clock).verify(first, SUB)  # not cached: jwt says expired


def test_a_mark_signed_by_another_key_or_of_another_shape_is_refused(keys: list[_Key]) -> None:
    clock = _Clock()
    tokens = PeerTokens(lambda: keys, clock)
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = int(clock.now)
    good = {"iss": ISSUER, "aud": AUDIENCE, "sub": SUB, "iat": now, "exp": now + 60}
    forged = jwt.encode(good, stranger, algorithm="RS256", headers={"kid": "k1"})
    assert not tokens.verify(forged, SUB)
    for claims in ({**good, "aud": "x"}, {**good, "iss": "x"}, {k: v for k, v in good.items() if k != "exp"}):
        token = jwt.encode(claims, keys[1].private_key, algorithm="RS256", headers={"kid": "k1"})
        assert not tokens.verify(token, SUB), claims
    hs = jwt.encode(good, "secret-secret-secret-secret-secret", algorithm="HS256", headers={"kid": "k1"})
    assert not tokens.verify(hs, SUB)


def test_a_key_made_a_moment_ago_does_not_sign_yet(keys: list[_Key]) -> None:
    clock = _Clock()
    fresh = _Key("new", keys[0].private_key, int(clock.now * 1000) - 1000)
    token = PeerTokens(lambda: [*keys, fresh], clock).token(SUB)
    assert jwt.get_unverified_header(token)["kid"] == "k1"
    only_fresh = PeerTokens(lambda: [fresh], clock).token(SUB)
    assert jwt.get_unverified_header(only_fresh)["kid"] == "new"


def test_no_keys_no_marks() -> None:
    tokens = PeerTokens(list)
    with pytest.raises(LookupError):
        tokens.token(SUB)
