"""Authentication (gateway.security.authn): static tokens, OIDC ID tokens, client certificates.

The OIDC issuer is a real aiohttp server on loopback serving a discovery document and a key set
that a test can change, fail, or count the fetches of; tokens are signed with PyJWT by keys made
here. Time for key refreshes and token file checks is a fake clock; token lifetimes are real.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import functools
import hashlib
import hmac
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway.errors import Code, Unavailable
from gateway.security import authn
from gateway.security.authn import Authenticator, Principal, Unauthenticated

in_fixture_loop = pytest.mark.asyncio(loop_scope="session")  # the loop of the async fixtures
AUDIENCE = "https://gateway.test"
SigningKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@functools.cache
def rsa_key(number: int) -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@functools.cache
def ec_key(number: int = 0) -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def public_jwk(key: SigningKey, kid: str) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    else:
        jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "use": "sig"}


@dataclass
class Issuer:
    """An OIDC issuer on loopback: `url`, the `keys` it serves, the fetches it answered."""

    url: str = ""
    keys: list[dict[str, Any]] = field(default_factory=list)
    says_issuer: str | None = None  # the discovery document's `issuer` (default: url)
    failing: bool = False
    hits: Counter[str] = field(default_factory=Counter)

    async def discovery(self, _request: web.Request) -> web.Response:
        self.hits["discovery"] += 1
        if self.failing:
            return web.Response(status=503)
        return web.json_response({"issuer": self.says_issuer or self.url, "jwks_uri": f"{self.url}/certs"})

    async def certs(self, _request: web.Request) -> web.Response:
        self.hits["certs"] += 1
        if self.failing:
            return web.Response(status=503)
        return web.json_response({"keys": self.keys})

    def token(self, key: SigningKey | None = None, kid: str = "k1", **claims: Any) -> str:
        """A token of this issuer, signed by `key` (default the first RSA key) as `kid`; a
        claim given as None is left out."""
        now = int(time.time())
        payload = {"iss": self.url, "aud": AUDIENCE, "sub": "1234", "iat": now, "exp": now + 3600}
        payload = {k: v for k, v in {**payload, **claims}.items() if v is not None}
        key = rsa_key(0) if key is None else key
        algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
        return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": kid})


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    fake = Issuer(keys=[public_jwk(rsa_key(0), "k1"), public_jwk(ec_key(), "e1")])
    app = web.Application()
    app.router.add_get(authn.DISCOVERY_PATH, fake.discovery)
    app.router.add_get("/certs", fake.certs)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield fake
    await runner.cleanup()


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


Make = Callable[..., Awaitable[Authenticator]]


@pytest.fixture
async def make(clock: Clock) -> AsyncIterator[Make]:
    """Starts Authenticators on the fake clock; stops them after the test."""
    made: list[Authenticator] = []

    async def make(
        token_file: Path | None = None, oidc: dict[str, str] | None = None, mtls: bool = False
    ) -> Authenticator:
        auth = Authenticator(token_file, oidc or {}, mtls, clock=clock)
        made.append(auth)
        await auth.start()
        return auth

    yield make
    for auth in made:
        await auth.stop()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def auth(issuer: Issuer, make: Make) -> Authenticator:
    return await make(oidc={issuer.url: f"https://other.test|{AUDIENCE}"})


async def refused(auth: Authenticator, token: str, *words: str) -> str:
    """The message `token` is refused with: it has `words` and nothing of the token."""
    with pytest.raises(Unauthenticated) as info:
        await auth.authenticate(f"Bearer {token}", None)
    message = str(info.value)
    assert info.value.code is Code.UNAUTHENTICATED
    assert token not in message and token[-12:] not in message
    for word in words:
        assert word in message
    return message


# -- OIDC ID tokens ------------------------------------------------------------------------------


@in_fixture_loop
async def test_an_id_token_names_its_email(issuer: Issuer, auth: Authenticator) -> None:
    token = issuer.token(email="alice@example.com", email_verified=True)
    assert await auth.authenticate(f"Bearer {token}", None) == Principal(
        "user:alice@example.com", f"oidc:{issuer.url}"
    )
    assert (await auth.authenticate(f"bearer  {token}", None)).member == "user:alice@example.com"
    assert (await auth.authenticate(f"BEARER {token}", None)).member == "user:alice@example.com"


@in_fixture_loop
async def test_es256_and_a_service_account(issuer: Issuer, auth: Authenticator) -> None:
    token = issuer.token(ec_key(), "e1", email="sa@proj.iam.gserviceaccount.com")
    principal = await auth.authenticate(f"Bearer {token}", None)
    assert principal.member == "serviceAccount:sa@proj.iam.gserviceaccount.com"


@in_fixture_loop
async def test_without_a_verified_email_the_subject_is_the_member(
    issuer: Issuer, auth: Authenticator
) -> None:
    expected = f"principal://{issuer.url.removeprefix('http://')}/subject/1234"
    unverified = [issuer.token(email="bob@example.com", email_verified=v) for v in (False, "false", "False")]
    for token in (issuer.token(), *unverified):
        assert (await auth.authenticate(f"Bearer {token}", None)).member == expected
    await refused(auth, issuer.token(sub=None), "neither an email nor a sub")


@in_fixture_loop
async def test_expired_and_not_yet_valid_tokens(issuer: Issuer, auth: Authenticator) -> None:
    now = int(time.time())
    await refused(auth, issuer.token(iat=now - 3600, exp=now - 60), "expired")
    await refused(auth, issuer.token(nbf=now + 120), "not valid yet")
    await refused(auth, issuer.token(iat=now + 120), "not valid yet")
    await refused(auth, issuer.token(exp=None), "no exp claim")
    # Within the leeway (30 s) of clock skew, both ways.
    for token in (issuer.token(exp=now - 10), issuer.token(nbf=now + 10, iat=now + 10)):
        assert (await auth.authenticate(f"Bearer {token}", None)).via == f"oidc:{issuer.url}"


@in_fixture_loop
async def test_the_audience_must_be_one_of_the_issuers(issuer: Issuer, auth: Authenticator) -> None:
    await refused(auth, issuer.token(aud="https://elsewhere.test"), "audience")
    await refused(auth, issuer.token(aud=None), "no aud claim")
    for aud in ("https://other.test", ["https://elsewhere.test", AUDIENCE]):
        assert await auth.authenticate(f"Bearer {issuer.token(aud=aud)}", None)


@in_fixture_loop
async def test_a_signature_by_another_key_under_the_same_kid(issuer: Issuer, auth: Authenticator) -> None:
    await refused(auth, issuer.token(rsa_key(1), "k1"), "signature does not verify")
    await refused(auth, issuer.token(ec_key(1), "e1"), "signature does not verify")
    # The key decides the algorithm: an ES256 token under an RSA key's kid is refused.
    await refused(auth, issuer.token(ec_key(), "k1"), "algorithm does not match")


def _hs256(claims: dict[str, Any], secret: bytes) -> str:
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = part(json.dumps({"alg": "HS256", "kid": "k1", "typ": "JWT"}).encode())
    body = part(json.dumps(claims).encode())
    signature = hmac.new(secret, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{part(signature)}"


@in_fixture_loop
async def test_only_rs256_and_es256_before_any_fetch(issuer: Issuer, auth: Authenticator) -> None:
    fetched = dict(issuer.hits)
    claims = jwt.decode(issuer.token(), options={"verify_signature": False})
    unsigned = jwt.encode(claims, "", algorithm="none", headers={"kid": "k1"})
    assert unsigned.endswith(".")
    await refused(auth, unsigned, "'none' are not accepted")
    await refused(auth, jwt.encode(claims, b"s" * 64, algorithm="HS256", headers={"kid": "k1"}), "'HS256'")
    # The classic confusion: HMAC keyed with the issuer's public key.
    public_pem = (
        rsa_key(0)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    await refused(auth, _hs256(claims, public_pem), "'HS256' are not accepted")
    await refused(auth, issuer.token(kid=""), "names no signing key")
    assert issuer.hits == fetched


@in_fixture_loop
async def test_tokens_of_other_issuers_are_refused_without_a_fetch(
    issuer: Issuer, auth: Authenticator
) -> None:
    fetched = dict(issuer.hits)
    await refused(auth, issuer.token(iss="https://evil.test"), "'https://evil.test' is not one")
    await refused(auth, issuer.token(iss=None), "issuer")
    assert issuer.hits == fetched


@in_fixture_loop
async def test_a_trailing_slash_does_not_matter(issuer: Issuer, make: Make) -> None:
    issuer.says_issuer = issuer.url + "/"
    auth = await make(oidc={issuer.url: AUDIENCE})
    token = issuer.token(iss=issuer.url + "/", email="a@example.com")
    assert (await auth.authenticate(f"Bearer {token}", None)).member == "user:a@example.com"


def test_google_tokens_may_name_the_issuer_without_its_scheme() -> None:
    assert authn._issuer(authn.GOOGLE_ISSUER, "aud").names >= {"accounts.google.com", authn.GOOGLE_ISSUER}
    assert "example.com" not in authn._issuer("https://example.com", "aud").names


def test_issuers_need_an_http_url_and_an_audience() -> None:
    with pytest.raises(ValueError, match="not an http"):
        Authenticator(None, {"accounts.google.com": "aud"}, False)
    with pytest.raises(ValueError, match="no audience"):
        Authenticator(None, {"https://issuer.test": " | "}, False)


# -- the issuer's keys ---------------------------------------------------------------------------


@in_fixture_loop
async def test_a_discovery_document_of_another_issuer_is_refused(
    issuer: Issuer, make: Make, caplog: pytest.LogCaptureFixture
) -> None:
    issuer.says_issuer = "https://impostor.test"
    auth = await make(oidc={issuer.url: AUDIENCE})
    assert "names the issuer 'https://impostor.test'" in caplog.text
    with pytest.raises(Unavailable, match="cannot be fetched"):
        await auth.authenticate(f"Bearer {issuer.token()}", None)


@in_fixture_loop
async def test_an_issuer_down_at_start_is_tried_on_first_use_then_every_30_s(
    issuer: Issuer, make: Make, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    issuer.failing = True
    auth = await make(oidc={issuer.url: AUDIENCE})
    assert "cannot fetch the signing keys" in caplog.text and "HTTP 503" in caplog.text
    token = issuer.token()
    with pytest.raises(Unavailable):
        await auth.authenticate(f"Bearer {token}", None)  # tried again, and failed again
    assert issuer.hits["discovery"] == 2
    issuer.failing = False
    with pytest.raises(Unavailable):
        await auth.authenticate(f"Bearer {token}", None)  # not tried: 30 s have not passed
    assert issuer.hits["discovery"] == 2
    clock.now += authn.KID_REFETCH_INTERVAL
    assert await auth.authenticate(f"Bearer {token}", None)
    assert issuer.hits == {"discovery": 3, "certs": 1}
    assert token not in caplog.text


@in_fixture_loop
async def test_an_unknown_kid_is_fetched_for_once_in_30_s(
    issuer: Issuer, auth: Authenticator, clock: Clock
) -> None:
    assert issuer.hits == {"discovery": 1, "certs": 1}
    await refused(auth, issuer.token(kid="made-up"), "signing key (kid) is not one")
    assert issuer.hits == {"discovery": 1, "certs": 2}
    await refused(auth, issuer.token(kid="made-up-too"), "signing key (kid) is not one")
    assert issuer.hits == {"discovery": 1, "certs": 2}
    clock.now += authn.KID_REFETCH_INTERVAL
    await refused(auth, issuer.token(kid="made-up"), "signing key (kid) is not one")
    assert issuer.hits == {"discovery": 1, "certs": 3}


@in_fixture_loop
async def test_concurrent_unknown_kids_share_one_fetch(
    issuer: Issuer, auth: Authenticator, clock: Clock
) -> None:
    clock.now += authn.KID_REFETCH_INTERVAL
    tokens = [issuer.token(kid=f"flood-{n}") for n in range(20)]
    results = await asyncio.gather(
        *(auth.authenticate(f"Bearer {t}", None) for t in tokens), return_exceptions=True
    )
    assert all(isinstance(r, Unauthenticated) for r in results)
    assert issuer.hits == {"discovery": 1, "certs": 2}


@in_fixture_loop
async def test_a_rotated_key_is_fetched_and_a_withdrawn_one_forgotten(
    issuer: Issuer, auth: Authenticator, clock: Clock
) -> None:
    old = issuer.token(email="a@example.com")
    assert await auth.authenticate(f"Bearer {old}", None)
    issuer.keys = [public_jwk(rsa_key(2), "k2")]
    new = issuer.token(rsa_key(2), "k2", email="b@example.com")
    clock.now += authn.KID_REFETCH_INTERVAL
    assert (await auth.authenticate(f"Bearer {new}", None)).member == "user:b@example.com"
    assert issuer.hits == {"discovery": 1, "certs": 2}
    # k1 was withdrawn: the token it signed is no longer taken from the cache.
    await refused(auth, old, "signing key (kid) is not one")


@in_fixture_loop
async def test_keys_are_fetched_again_every_hour(issuer: Issuer, auth: Authenticator, clock: Clock) -> None:
    assert await auth.authenticate(f"Bearer {issuer.token()}", None)
    clock.now += authn.KEYS_MAX_AGE
    issuer.failing = True
    assert await auth.authenticate(f"Bearer {issuer.token(sub='5678')}", None)  # the old keys serve
    assert issuer.hits == {"discovery": 2, "certs": 1}
    issuer.failing = False
    clock.now += authn.KID_REFETCH_INTERVAL
    assert await auth.authenticate(f"Bearer {issuer.token(sub='9')}", None)
    assert issuer.hits == {"discovery": 3, "certs": 2}


@in_fixture_loop
async def test_a_verified_token_is_remembered(issuer: Issuer, auth: Authenticator, clock: Clock) -> None:
    token = issuer.token(email="a@example.com")
    first = await auth.authenticate(f"Bearer {token}", None)
    fetched = dict(issuer.hits)
    clock.now += authn.KEYS_MAX_AGE  # the keys are due, but a remembered token needs none
    assert await auth.authenticate(f"Bearer {token}", None) is first
    assert issuer.hits == fetched


def test_the_token_cache_drops_expired_entries_and_evicts_the_oldest() -> None:
    cache = authn.TokenCache(limit=2)
    a, b, c = (Principal(f"user:{n}@x", "oidc:i") for n in "abc")
    cache.put(b"a", a, 100.0)
    cache.put(b"b", b, 200.0)
    assert cache.get(b"a", 99.0) is a
    assert cache.get(b"a", 100.0) is None and len(cache) == 1
    cache.put(b"a", a, 100.0)
    cache.put(b"c", c, 300.0)
    assert cache.get(b"b", 0.0) is None and cache.get(b"a", 0.0) is a and cache.get(b"c", 0.0) is c


# -- the token file ------------------------------------------------------------------------------

TOKENS = b"""\
# CI and friends
s3cret-ci   user:ci@example.com
  tok-sa serviceAccount:sa@proj.iam.gserviceaccount.com   # the deployer

tok-group group:admins@example.com
tok-domain domain:example.com
tok-fed principal://iam.googleapis.com/locations/global/workforcePools/p/subject/s
"""


def test_token_file_lines() -> None:
    tokens = authn.parse_token_file(TOKENS)
    assert tokens == {
        hashlib.sha256(token).digest(): member
        for token, member in [
            (b"s3cret-ci", "user:ci@example.com"),
            (b"tok-sa", "serviceAccount:sa@proj.iam.gserviceaccount.com"),
            (b"tok-group", "group:admins@example.com"),
            (b"tok-domain", "domain:example.com"),
            (b"tok-fed", "principal://iam.googleapis.com/locations/global/workforcePools/p/subject/s"),
        ]
    }
    assert authn.parse_token_file(b"") == {}


@pytest.fixture(
    params=[
        (b"# fine\nhunter2-only\n", "line 2: expected TOKEN MEMBER, found 1 fields"),
        (b"hunter2 user:a@x extra\n", "line 1: expected TOKEN MEMBER, found 3 fields"),
        (b"\n\nhunter2 alice@example.com\n", "line 3: the second field is not an IAM member"),
        (b"user:a@x hunter2\n", "line 1: the second field is not an IAM member"),
        (b"hunter2 user:alice\n", "line 1: the second field is not an IAM member"),
        (b"hunter2 user:a@x\nother user:b@x\nhunter2 user:c@x\n", "line 3: the same token as line 1"),
        (b"ok user:a@x\nhunter2\xff user:b@x\n", "line 2: not UTF-8"),
    ],
    ids=["one field", "three fields", "email", "swapped", "no at", "twice", "not utf-8"],
)
def bad_token_file(request: pytest.FixtureRequest) -> tuple[bytes, str]:
    return request.param  # type: ignore[no-any-return]


def test_a_bad_line_is_named_and_not_quoted(bad_token_file: tuple[bytes, str]) -> None:
    content, message = bad_token_file
    with pytest.raises(ValueError, match=r"^line") as info:
        authn.parse_token_file(content)
    assert str(info.value).startswith(message)
    assert "hunter2" not in str(info.value)


@in_fixture_loop
async def test_a_bad_token_file_stops_the_start(tmp_path: Path, make: Make) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(b"hunter2 nobody\n")
    with pytest.raises(ValueError, match="tokens: line 1: the second field") as info:
        await make(token_file=path)
    assert "hunter2" not in str(info.value)
    with pytest.raises(FileNotFoundError):
        await make(token_file=tmp_path / "missing")


@in_fixture_loop
async def test_static_tokens_and_their_reload(
    tmp_path: Path, make: Make, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(TOKENS)
    auth = await make(token_file=path)
    principal = await auth.authenticate("Bearer s3cret-ci", None)
    assert principal == Principal("user:ci@example.com", "token-file")
    assert (await auth.authenticate("Bearer tok-sa", None)).member.startswith("serviceAccount:")
    await refused(auth, "not-a-known-token", "not one of the gateway's tokens")

    path.write_bytes(b"new-token user:new@example.com\n")
    assert await auth.authenticate("Bearer s3cret-ci", None)  # looked at once a second at most
    clock.now += authn.TOKEN_FILE_CHECK_INTERVAL
    assert (await auth.authenticate("Bearer new-token", None)).member == "user:new@example.com"
    await refused(auth, "s3cret-ci")

    path.write_bytes(b"new-token user:new@example.com\nbroken-hunter2\n")
    clock.now += authn.TOKEN_FILE_CHECK_INTERVAL
    assert (await auth.authenticate("Bearer new-token", None)).member == "user:new@example.com"
    assert "line 2: expected TOKEN MEMBER" in caplog.text and "stay in force" in caplog.text
    path.unlink()
    clock.now += authn.TOKEN_FILE_CHECK_INTERVAL
    assert (await auth.authenticate("Bearer new-token", None)).member == "user:new@example.com"
    assert caplog.text.count("stay in force") == 2
    clock.now += authn.TOKEN_FILE_CHECK_INTERVAL
    assert await auth.authenticate("Bearer new-token", None)
    assert caplog.text.count("stay in force") == 2  # logged once per change
    for secret in ("s3cret", "new-token", "hunter2"):
        assert secret not in caplog.text


@in_fixture_loop
async def test_the_token_file_comes_before_oidc(tmp_path: Path, issuer: Issuer, make: Make) -> None:
    token = issuer.token(email="oidc@example.com")
    path = tmp_path / "tokens"
    path.write_text(f"{token} user:static@example.com\n")
    auth = await make(token_file=path, oidc={issuer.url: AUDIENCE})
    assert await auth.authenticate(f"Bearer {token}", None) == Principal(
        "user:static@example.com", "token-file"
    )
    other = issuer.token(email="oidc@example.com", sub="2")
    assert (await auth.authenticate(f"Bearer {other}", None)).member == "user:oidc@example.com"


# -- certificates --------------------------------------------------------------------------------


def certificate(common_name: str | None, *names: x509.GeneralName) -> x509.Certificate:
    key = ec_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)] if common_name else [])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "test CA")]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(names)), critical=False)
    return builder.sign(key, hashes.SHA256())


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def test_certificate_members() -> None:
    with_email = certificate(
        "Alice", x509.DNSName("alice.test"), x509.RFC822Name("alice@example.com"), x509.RFC822Name("b@x")
    )
    assert authn.principal_of_certificate(der(with_email)) == "user:alice@example.com"
    assert authn.principal_of_certificate(pem(with_email)) == "user:alice@example.com"
    account = certificate(None, x509.RFC822Name("ci@proj.iam.gserviceaccount.com"))
    assert authn.principal_of_certificate(pem(account)) == "serviceAccount:ci@proj.iam.gserviceaccount.com"
    only_cn = certificate("build-bot", x509.DNSName("bot.test"))
    assert authn.principal_of_certificate(der(only_cn)) == "principal://x509/subject/build-bot"
    assert authn.principal_of_certificate(pem(certificate("carol"))) == "principal://x509/subject/carol"
    with pytest.raises(ValueError, match="no email address"):
        authn.principal_of_certificate(der(certificate(None, x509.DNSName("anonymous.test"))))
    with pytest.raises(ValueError, match=r"."):  # cryptography's words
        authn.principal_of_certificate(b"not a certificate")


def test_member_of_email() -> None:
    assert authn.member_of_email("a@example.com") == "user:a@example.com"
    assert (
        authn.member_of_email("sa@p.iam.gserviceaccount.com") == "serviceAccount:sa@p.iam.gserviceaccount.com"
    )
    assert authn.member_of_email("1-compute@developer.GServiceAccount.com").startswith("serviceAccount:")
    assert authn.member_of_email("x@gserviceaccount.com.evil.test") == "user:x@gserviceaccount.com.evil.test"
    for bad in ("nobody", "a b@example.com", "@example.com", "a@"):
        with pytest.raises(ValueError, match="not an email address"):
            authn.member_of_email(bad)


@in_fixture_loop
async def test_mtls(tmp_path: Path, make: Make) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(TOKENS)
    auth = await make(token_file=path, mtls=True)
    cert = pem(certificate("dave", x509.RFC822Name("dave@example.com")))
    assert await auth.authenticate(None, cert) == Principal("user:dave@example.com", "mtls")
    assert await auth.authenticate(None, der(certificate("erin"))) == Principal(
        "principal://x509/subject/erin", "mtls"
    )
    # A token decides, good or bad, whatever certificate comes with it.
    assert (await auth.authenticate("Bearer s3cret-ci", cert)).member == "user:ci@example.com"
    with pytest.raises(Unauthenticated, match="not one of the gateway's tokens"):
        await auth.authenticate("Bearer wrong", cert)
    with pytest.raises(Unauthenticated, match="names no email address and no common name"):
        await auth.authenticate(None, der(certificate(None, x509.DNSName("anonymous.test"))))
    with pytest.raises(
        Unauthenticated, match="no credentials: send `authorization: Bearer <token>` or a client"
    ):
        await auth.authenticate(None, None)


@in_fixture_loop
async def test_certificates_are_ignored_without_mtls(tmp_path: Path, make: Make) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(TOKENS)
    auth = await make(token_file=path)
    with pytest.raises(
        Unauthenticated, match=r"^Request had no credentials: send `authorization: Bearer"
    ) as info:
        await auth.authenticate(None, pem(certificate("dave")))
    assert "certificate" not in str(info.value)


# -- the authorization value ---------------------------------------------------------------------


@in_fixture_loop
async def test_no_credentials(tmp_path: Path, make: Make) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(TOKENS)
    auth = await make(token_file=path)
    for value in (None, "", "   "):
        with pytest.raises(Unauthenticated, match=r"^Request had no credentials") as info:
            await auth.authenticate(value, None)
        assert info.value.code.http_status == 401


@in_fixture_loop
async def test_other_schemes_are_refused_without_quoting_them(tmp_path: Path, make: Make) -> None:
    path = tmp_path / "tokens"
    path.write_bytes(TOKENS)
    auth = await make(token_file=path)
    for value in ("Basic dXNlcjpwdw==", "s3cret-ci", "Bearer", "Bearer s3cret ci", "Token s3cret-ci"):
        with pytest.raises(Unauthenticated, match="not `Bearer <token>`") as info:
            await auth.authenticate(value, None)
        assert "s3cret" not in str(info.value) and "dXNlcjpwdw" not in str(info.value)
    with pytest.raises(Unauthenticated, match="longer than"):
        await auth.authenticate("Bearer " + "x" * (authn.MAX_TOKEN_CHARS + 1), None)


@in_fixture_loop
async def test_a_token_that_is_no_jwt(issuer: Issuer, auth: Authenticator) -> None:
    await refused(auth, "opaque-access-token", "neither one of the gateway's tokens nor a JWT")
    await refused(auth, "bm90.anNvbg.x", "not a well-formed JWT")
