"""Push tokens and the key set (gateway.push.auth): claims, caching, verification with PyJWT."""

from __future__ import annotations

import functools
import json

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from gateway.push import auth

ISSUER = "http://gateway.test:8086"


@functools.cache
def _key(created_ms: int = 0) -> auth.SigningKey:
    return auth.new_key(created_ms)


def _verify(token: str, keys: list[auth.SigningKey], audience: str) -> dict[str, object]:
    kid = jwt.get_unverified_header(token)["kid"]
    (jwk,) = [k for k in auth.jwks(keys)["keys"] if k["kid"] == kid]
    public = jwt.PyJWK(jwk).key
    return dict(jwt.decode(token, public, algorithms=["RS256"], audience=audience, issuer=ISSUER))


def test_token_claims_and_header() -> None:
    key = _key()
    signer = auth.TokenSigner(lambda: [key], ISSUER, clock=lambda: 1_700_000_000.5)
    token = signer.token("https://aud.test", "sa@p.iam.gserviceaccount.com")
    assert jwt.get_unverified_header(token) == {"alg": "RS256", "kid": key.kid, "typ": "JWT"}
    claims = jwt.decode(
        token,
        key.private_key.public_key(),
        algorithms=["RS256"],
        audience="https://aud.test",
        options={"verify_exp": False},
    )
    assert claims == {
        "iss": ISSUER,
        "aud": "https://aud.test",
        "azp": "sa@p.iam.gserviceaccount.com",
        "sub": "sa@p.iam.gserviceaccount.com",
        "email": "sa@p.iam.gserviceaccount.com",
        "email_verified": True,
        "iat": 1_700_000_000,
        "exp": 1_700_003_600,
    }


def test_tokens_are_cached_per_audience_and_email_until_close_to_expiry() -> None:
    now = [1_700_000_000.0]
    signer = auth.TokenSigner(lambda: [_key()], ISSUER, clock=lambda: now[0])
    first = signer.token("a", "x@y")
    assert signer.token("a", "x@y") is first
    assert signer.token("b", "x@y") != first
    assert signer.token("a", "z@y") != first
    now[0] += auth.TOKEN_LIFETIME - auth.REFRESH_BEFORE - 1
    assert signer.token("a", "x@y") is first
    now[0] += 2
    assert signer.token("a", "x@y") != first


def test_no_key_no_token() -> None:
    with pytest.raises(LookupError):
        auth.TokenSigner(list, ISSUER).token("a", "b")


def test_tokens_verify_against_the_jwks_and_not_with_another_key() -> None:
    key, other = _key(), auth.new_key(0)
    token = auth.TokenSigner(lambda: [key], ISSUER).token("aud", "sa@x")
    assert _verify(token, [key, other], "aud")["email"] == "sa@x"
    forged = jwt.encode(
        {"aud": "aud", "iss": ISSUER}, other.private_key, algorithm="RS256", headers={"kid": key.kid}
    )
    with pytest.raises(jwt.InvalidSignatureError):
        _verify(forged, [key, other], "aud")
    with pytest.raises(jwt.InvalidAudienceError):
        _verify(token, [key], "another-aud")


def test_jwks_and_openid_configuration() -> None:
    key = _key()
    (jwk,) = auth.jwks([key])["keys"]
    assert jwk["kty"] == "RSA" and jwk["alg"] == "RS256" and jwk["use"] == "sig"
    assert jwk["kid"] == key.kid == auth.thumbprint(key.private_key)
    assert "d" not in jwk, "only the public half is published"
    config = auth.openid_configuration(ISSUER)
    assert config["issuer"] == ISSUER
    assert config["jwks_uri"] == ISSUER + "/oauth2/v3/certs"
    assert config["id_token_signing_alg_values_supported"] == ["RS256"]


def test_key_storage_round_trip_and_pem_files() -> None:
    key = _key(1234)
    back = auth.decode_key(auth.encode_key(key))
    assert (back.kid, back.created_ms) == (key.kid, 1234)
    tampered = json.loads(auth.encode_key(key))
    tampered["kid"] = "other"
    with pytest.raises(ValueError, match="does not match"):
        auth.decode_key(json.dumps(tampered).encode())
    pem = key.private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    assert auth.key_from_pem(pem).kid == key.kid


def test_a_new_key_signs_once_it_has_settled() -> None:
    old, new = (
        auth.SigningKey("old", _key().private_key, 0),
        auth.SigningKey("new", _key().private_key, 100_000),
    )
    assert auth.signing_key([old, new], 100_000 + auth.SETTLE_MS - 1) is old
    assert auth.signing_key([old, new], 100_000 + auth.SETTLE_MS) is new
    assert auth.signing_key([new], 100_000) is new
    assert auth.signing_key([], 0) is None
