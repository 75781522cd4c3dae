"""Who is calling: the IAM member that a request's credentials prove.

The wire layers call `Authenticator.authenticate` once per RPC with the `authorization` value the
request carried and the client certificate the TLS layer verified. The answer is a `Principal`
whose `member` is in IAM's member form (what project IAM bindings name), or `Unauthenticated`
(gRPC UNAUTHENTICATED, HTTP 401: what Google answers). The core never sees credentials.

Credentials, in this order:
- `authorization: Bearer TOKEN` (the scheme in any case). When a token is sent, the token alone
  decides: a bad token is refused even when a good client certificate came with it, since the
  caller asked to be someone in particular and must not silently become someone else.
  1. The static token file (`--auth-token-file`): `TOKEN MEMBER` lines (`parse_token_file`).
     Lookups go through the SHA-256 of the token, so their timing says nothing about the
     tokens. The file is re-read when its size, mtime or inode changes (checked at most once a
     second); a new version that does not parse is refused, logged, and the tokens read before
     stay in force.
  2. An OIDC ID token (a JWT) of a configured issuer (`--auth-oidc ISSUER=AUD|AUD`): RS256 or
     ES256 only (never `none`, never HS*), signed by a key of the issuer's key set, `aud` one of
     the issuer's audiences, `exp` required, `nbf` and `iat` not in the future, with
     `leeway_seconds` of slack for clocks. A token whose `iss` no issuer matches is refused
     before any key is fetched. Google's issuer, https://accounts.google.com, is also matched
     by the bare `accounts.google.com` that older Google tokens carry; issuers are compared
     without a trailing `/`.
- Otherwise, with mTLS on, the client certificate (`principal_of_certificate`).

Members:
- a token's `email` claim (unless `email_verified` is false): `serviceAccount:EMAIL` for
  addresses at *.gserviceaccount.com, else `user:EMAIL` (`member_of_email`);
- a token without one: `principal://ISSUER-WITHOUT-SCHEME/subject/SUB`, the form of Google's
  identity-federation principals. `user:SUB` would be ambiguous: the same `sub` at two issuers,
  or a `sub` that happens to be somebody's email address;
- a certificate: its first email subjectAltName (rfc822Name) as above, else
  `principal://x509/subject/` + its
  subject's common name.

Keys: each issuer's discovery document (`ISSUER/.well-known/openid-configuration`, whose
`issuer` must be the configured one) names its `jwks_uri`; both are fetched with aiohttp at start
(an issuer that does not answer is logged and tried again on first use), again every hour, and
the key set alone when a token names a key id (`kid`) not in it, at most once per 30 s per
issuer, so a flood of made-up key ids cannot make the gateway hammer the issuer. While an
issuer's keys cannot be had, its tokens get UNAVAILABLE (retried by the clients), not
UNAUTHENTICATED: they may be good. Verified tokens are cached (by their SHA-256, up to 10,000,
the oldest evicted first) until their `exp`, so a repeat call costs a hash and a dict lookup;
the cache is emptied when an issuer withdraws a key.

Tokens are never logged and no error message quotes one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import jwt
from cryptography import x509
from cryptography.x509.oid import NameOID

from gateway.errors import Unauthenticated, Unavailable, quote

log = logging.getLogger(__name__)

ALGORITHMS = frozenset({"RS256", "ES256"})
GOOGLE_ISSUER = "https://accounts.google.com"
DISCOVERY_PATH = "/.well-known/openid-configuration"
KEYS_MAX_AGE = 3600.0  # seconds: an issuer's discovery document and keys are fetched again after this
KID_REFETCH_INTERVAL = 30.0  # seconds: the least time between two fetches of one issuer's keys on demand
TOKEN_FILE_CHECK_INTERVAL = 1.0  # seconds between two looks at the token file's size and mtime
VERIFIED_TOKENS = 10_000  # verified JWTs remembered
CERTIFICATES = 1024  # client certificates whose member is remembered
MAX_TOKEN_CHARS = 16 * 1024  # gRPC metadata is smaller still; a longer token is not parsed
MAX_DOCUMENT_BYTES = 1024 * 1024  # a discovery document or key set larger than this is refused
INVALID = "Request had invalid authentication credentials"

# Three base64url parts; the third may be empty, as in alg=none tokens (refused with a reason).
_JWT_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+")
_MEMBER = re.compile(r"(?:user|serviceAccount|group):[^@\s]+@[^@\s]+|domain:[^@\s]+|principal://\S+")


@dataclasses.dataclass(frozen=True, slots=True)
class Principal:
    member: str  # IAM member form: "user:alice@example.com", "serviceAccount:sa@p.iam.gserviceaccount.com"
    via: str  # "token-file", "oidc:<issuer>", "mtls"


# -- members -------------------------------------------------------------------------------------


def member_of_email(email: str) -> str:
    """`serviceAccount:EMAIL` for addresses at *.gserviceaccount.com, else `user:EMAIL`."""
    if not _EMAIL.fullmatch(email):
        raise ValueError(f"{quote(email, 100)!r} is not an email address")
    domain = email.rpartition("@")[2].lower()
    return ("serviceAccount:" if domain.endswith(".gserviceaccount.com") else "user:") + email


CERTIFICATE_PRINCIPAL = "principal://x509/subject/"


def principal_of_certificate(cert: bytes) -> str:
    """The member a certificate (DER or PEM) names: its first email subjectAltName (rfc822Name)
    via `member_of_email`, else `principal://x509/subject/` + its subject's common name (`user:`
    takes an email address only, and IAM refuses anything else there). ValueError if neither."""
    if cert.lstrip().startswith(b"-----BEGIN"):
        certificate = x509.load_pem_x509_certificate(cert)
    else:
        certificate = x509.load_der_x509_certificate(cert)
    try:
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        emails: list[str] = []
    else:
        emails = names.get_values_for_type(x509.RFC822Name)
    if emails:
        return member_of_email(emails[0])
    for attribute in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME):
        if isinstance(attribute.value, str) and attribute.value.strip():
            return CERTIFICATE_PRINCIPAL + attribute.value.strip()
    raise ValueError("the certificate names no email address (subjectAltName) and no common name")


_member_of_certificate = functools.lru_cache(maxsize=CERTIFICATES)(principal_of_certificate)


def _member_of_claims(claims: Mapping[str, Any], issuer: str) -> str:
    email = claims.get("email")
    verified = str(claims.get("email_verified", True)).lower() != "false"  # some issuers send "false"
    if isinstance(email, str) and email and verified:
        try:
            return member_of_email(email)
        except ValueError:
            raise Unauthenticated(f"{INVALID}: the token's email claim is not an email address") from None
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise Unauthenticated(f"{INVALID}: the token has neither an email nor a sub claim")
    return f"principal://{issuer.partition('://')[2]}/subject/{subject}"


# -- the static token file -----------------------------------------------------------------------


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def parse_token_file(data: bytes) -> dict[bytes, str]:
    """`TOKEN MEMBER` lines -> {SHA-256 of TOKEN: MEMBER}. Blank lines and lines whose first
    field starts with `#` are skipped, and so is the rest of a line after ` #`. A bad line is a
    ValueError naming its number, never its content (a token may be where a member should be)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = data[: error.start].count(b"\n") + 1
        raise ValueError(f"line {bad}: not UTF-8") from None
    tokens: dict[bytes, str] = {}
    line_of: dict[bytes, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 2 and fields[2].startswith("#"):
            fields = fields[:2]
        if len(fields) != 2:
            raise ValueError(f"line {number}: expected TOKEN MEMBER, found {len(fields)} fields")
        token, member = fields
        if not _MEMBER.fullmatch(member):
            raise ValueError(
                f"line {number}: the second field is not an IAM member (user:EMAIL, "
                "serviceAccount:EMAIL, group:EMAIL, domain:DOMAIN or principal://...)"
            )
        digest = _digest(token)
        if digest in tokens:
            raise ValueError(f"line {number}: the same token as line {line_of[digest]}")
        tokens[digest], line_of[digest] = member, number
    return tokens


_Stamp = tuple[int, int, int]  # inode, size, mtime in ns: a change means the file changed
_MISSING: _Stamp = (-1, -1, -1)


class _TokenFile:
    def __init__(self, path: Path, clock: Callable[[], float]) -> None:
        self.path = path
        self._clock = clock
        self._tokens: dict[bytes, str] = {}
        self._stamp: _Stamp | None = None
        self._checked = -math.inf

    def member(self, digest: bytes) -> str | None:
        return self._tokens.get(digest)

    async def load(self) -> None:
        """Read the file; OSError or ValueError (with the path) if it cannot be read or parsed."""
        self._checked = self._clock()
        stamp = self._stat()
        data = await asyncio.to_thread(self.path.read_bytes)
        try:
            tokens = parse_token_file(data)
        except ValueError as error:
            raise ValueError(f"{self.path}: {error}") from None
        self._tokens, self._stamp = tokens, stamp
        log.info("%s: %d bearer tokens", self.path, len(tokens))

    async def refresh(self) -> None:
        """Read the file again if it changed, looking at most once a second. A version that
        cannot be read or parsed is logged once, and the tokens read before stay in force."""
        now = self._clock()
        if now - self._checked < TOKEN_FILE_CHECK_INTERVAL:
            return
        self._checked = now
        try:
            stamp = self._stat()
        except OSError:
            stamp = _MISSING
        if stamp == self._stamp:
            return
        try:
            await self.load()
        except (OSError, ValueError) as error:
            self._stamp = stamp  # logged once per change, not once a second
            log.error("%s (the tokens read before stay in force)", error)

    def _stat(self) -> _Stamp:
        st = os.stat(self.path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)


# -- verified tokens -----------------------------------------------------------------------------


class TokenCache:
    """Verified tokens by their SHA-256 -> (principal, exp): at most `limit`, the oldest evicted
    first; an entry past its exp is dropped, not used."""

    def __init__(self, limit: int = VERIFIED_TOKENS) -> None:
        self._limit = limit
        self._entries: dict[bytes, tuple[Principal, float]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: bytes, now: float) -> Principal | None:
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if now >= entry[1]:
            del self._entries[digest]
            return None
        return entry[0]

    def put(self, digest: bytes, principal: Principal, exp: float) -> None:
        if digest not in self._entries:
            while len(self._entries) >= self._limit:
                del self._entries[next(iter(self._entries))]
        self._entries[digest] = (principal, exp)

    def clear(self) -> None:
        self._entries.clear()


# -- OIDC issuers --------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True, eq=False)
class _Issuer:
    url: str  # as configured, without a trailing /
    audiences: tuple[str, ...]
    names: frozenset[str]  # the `iss` values that name this issuer
    jwks_uri: str | None = None
    keys: dict[str, jwt.PyJWK] = dataclasses.field(default_factory=dict)
    loaded_at: float | None = None  # clock time of the last key set fetched
    attempted_at: float | None = None  # of the last fetch a token asked for (it may have failed)
    failed: bool = False  # the last fetch failed
    lock: asyncio.Lock = dataclasses.field(default_factory=asyncio.Lock)


def _issuer(url: str, audiences: str) -> _Issuer:
    url = url.strip().rstrip("/")
    if not url.startswith(("https://", "http://")):
        raise ValueError(f"OIDC issuer {quote(url, 100)!r} is not an http(s) URL")
    wanted = tuple(a.strip() for a in audiences.split("|") if a.strip())
    if not wanted:
        raise ValueError(f"OIDC issuer {url} has no audience")
    names = {url, url + "/"}
    if url == GOOGLE_ISSUER:
        names.add("accounts.google.com")
    return _Issuer(url, wanted, frozenset(names))


def _keys_of(document: Mapping[str, Any]) -> dict[str, jwt.PyJWK]:
    """The RS256 and ES256 signing keys of a JWK set, by key id. Keys of other types, for
    encryption or without an id are skipped; ValueError if none is left."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise ValueError("the key set has no `keys` list")
    keys: dict[str, jwt.PyJWK] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid")
        if not isinstance(kid, str) or not kid:
            continue
        try:
            key = jwt.PyJWK(entry)
        except jwt.PyJWTError:
            continue
        if key.algorithm_name in ALGORITHMS:
            keys[kid] = key
    if not keys:
        raise ValueError("the key set has no RS256 or ES256 signing key with a key id")
    return keys


# The reasons a token is refused, first match wins (the PyJWT exceptions form a hierarchy).
_REASONS: tuple[tuple[type[Exception], str], ...] = (
    (jwt.ExpiredSignatureError, "the token has expired"),
    (jwt.ImmatureSignatureError, "the token is not valid yet (its nbf or iat is in the future)"),
    (jwt.InvalidAudienceError, "the token's audience (aud) is not one this gateway accepts"),
    (jwt.InvalidIssuerError, "the token's issuer is not one this gateway accepts"),
    (jwt.InvalidSignatureError, "the token's signature does not verify"),
    (jwt.InvalidAlgorithmError, "the token's algorithm does not match its signing key"),
    (jwt.InvalidKeyError, "the issuer's signing key is not usable"),
    (jwt.DecodeError, "the token is not a well-formed JWT"),
)


def _reason(error: jwt.PyJWTError) -> str:
    if isinstance(error, jwt.MissingRequiredClaimError):
        return f"the token has no {error.claim} claim"
    return next((text for kind, text in _REASONS if isinstance(error, kind)), "the token is not valid")


# -- the authenticator ---------------------------------------------------------------------------


class Authenticator:
    """Decides who calls, from a bearer token or a client certificate (module docstring)."""

    def __init__(
        self,
        token_file: Path | None,
        oidc: Mapping[str, str],
        mtls: bool,
        *,
        http_timeout: float = 5.0,
        leeway_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`oidc`: issuer URL -> its audiences, separated by `|` (Settings.auth_oidc). `clock`
        (seconds, monotonic) times key refreshes and token file checks; `exp` is wall time."""
        self._token_file = _TokenFile(token_file, clock) if token_file is not None else None
        self._issuers = [_issuer(url, audiences) for url, audiences in oidc.items()]
        self._by_name = {name: issuer for issuer in self._issuers for name in issuer.names}
        self._mtls = mtls
        self._timeout = aiohttp.ClientTimeout(total=http_timeout)
        self._leeway = leeway_seconds
        self._clock = clock
        self._verified = TokenCache()
        self._http: aiohttp.ClientSession | None = None
        ways = ["`authorization: Bearer <token>`"]
        if mtls:
            ways.append("a client certificate")
        self._no_credentials = f"Request had no credentials: send {' or '.join(ways)}"

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Read the token file (an error in it is fatal) and fetch each issuer's keys (an issuer
        that does not answer is logged, and tried again when a token of it first comes)."""
        if self._token_file is not None:
            await self._token_file.load()
        await asyncio.gather(*(self._first_fetch(issuer) for issuer in self._issuers))

    async def stop(self) -> None:
        """Idempotent."""
        http, self._http = self._http, None
        if http is not None:
            await http.close()

    async def __aenter__(self) -> Authenticator:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- authentication ------------------------------------------------------------------------

    async def authenticate(self, authorization: str | None, peer_certificate: bytes | None) -> Principal:
        """The caller of a request that carried `authorization` (the header's raw value) and
        `peer_certificate` (verified by TLS; DER or PEM). Unauthenticated if they prove no one;
        Unavailable if a token's issuer cannot be reached to get its keys."""
        if authorization is not None and authorization.strip():
            return await self._bearer(_bearer_token(authorization))
        if self._mtls and peer_certificate:
            try:
                return Principal(_member_of_certificate(peer_certificate), "mtls")
            except ValueError:
                raise Unauthenticated(
                    f"{INVALID}: the client certificate names no email address and no common name"
                ) from None
        raise Unauthenticated(self._no_credentials)

    async def _bearer(self, token: str) -> Principal:
        digest = _digest(token)
        if self._token_file is not None:
            await self._token_file.refresh()
            member = self._token_file.member(digest)
            if member is not None:
                return Principal(member, "token-file")
        cached = self._verified.get(digest, time.time())
        if cached is not None:
            return cached
        if not self._issuers:
            raise Unauthenticated(f"{INVALID}: the bearer token is not one of the gateway's tokens")
        if not _JWT_SHAPE.fullmatch(token):
            raise Unauthenticated(
                f"{INVALID}: the bearer token is neither one of the gateway's tokens nor a JWT"
            )
        return await self._verify(token, digest)

    async def _verify(self, token: str, digest: bytes) -> Principal:
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise Unauthenticated(f"{INVALID}: the bearer token is not a well-formed JWT") from None
        algorithm = header.get("alg")
        if algorithm not in ALGORITHMS:
            raise Unauthenticated(
                f"{INVALID}: tokens signed with {quote(algorithm, 20)!r} are not accepted "
                "(only RS256 and ES256 are)"
            )
        iss = unverified.get("iss")
        issuer = self._by_name.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            raise Unauthenticated(
                f"{INVALID}: the token's issuer {quote(iss, 100)!r} is not one this gateway accepts"
            )
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthenticated(f"{INVALID}: the token names no signing key (kid)")
        key = await self._key(issuer, kid)
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[key.algorithm_name],  # the key's, never the token's
                audience=issuer.audiences,
                issuer=issuer.names,
                leeway=self._leeway,
                options={"require": ["exp"], "enforce_minimum_key_length": True},
            )
        except jwt.PyJWTError as error:
            raise Unauthenticated(f"{INVALID}: {_reason(error)}") from None
        principal = Principal(_member_of_claims(claims, issuer.url), f"oidc:{issuer.url}")
        self._verified.put(digest, principal, float(claims["exp"]))
        return principal

    # -- issuers' keys -------------------------------------------------------------------------

    def _wants_fetch(self, issuer: _Issuer, kid: str, now: float) -> bool:
        stale = issuer.loaded_at is None or now - issuer.loaded_at >= KEYS_MAX_AGE
        due = issuer.attempted_at is None or now - issuer.attempted_at >= KID_REFETCH_INTERVAL
        return due and (stale or kid not in issuer.keys)

    async def _key(self, issuer: _Issuer, kid: str) -> jwt.PyJWK:
        if self._wants_fetch(issuer, kid, self._clock()):
            async with issuer.lock:
                now = self._clock()
                if self._wants_fetch(issuer, kid, now):  # not done meanwhile by another request
                    stale = issuer.loaded_at is None or now - issuer.loaded_at >= KEYS_MAX_AGE
                    await self._fetch(issuer, rediscover=stale)
        key = issuer.keys.get(kid)
        if key is not None:
            return key
        if issuer.failed or issuer.loaded_at is None:
            raise Unavailable(
                f"The signing keys of OIDC issuer {issuer.url} cannot be fetched; try again later"
            )
        raise Unauthenticated(f"{INVALID}: the token's signing key (kid) is not one of its issuer's keys")

    async def _first_fetch(self, issuer: _Issuer) -> None:
        async with issuer.lock:
            await self._fetch(issuer, rediscover=True)
            issuer.attempted_at = None  # the 30 s between fetches are counted from the first on demand

    async def _fetch(self, issuer: _Issuer, *, rediscover: bool) -> None:
        """Fetch the issuer's key set (and first its discovery document if `rediscover`). A
        failure is logged; the keys fetched before, if any, stay in use."""
        issuer.attempted_at = self._clock()
        try:
            if rediscover or issuer.jwks_uri is None:
                issuer.jwks_uri = await self._discover(issuer)
            keys = _keys_of(await self._get_json(issuer.jwks_uri))
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            issuer.failed = True
            log.warning(
                "cannot fetch the signing keys of OIDC issuer %s: %s (%s)",
                issuer.url,
                str(error) or type(error).__name__,
                "the keys fetched before stay in use" if issuer.keys else "its tokens are refused",
            )
            return
        if issuer.keys.keys() - keys.keys():
            self._verified.clear()  # a key was withdrawn: tokens it signed are checked again
        issuer.keys, issuer.loaded_at, issuer.failed = keys, self._clock(), False
        log.info("OIDC issuer %s: %d signing keys (%s)", issuer.url, len(keys), ", ".join(sorted(keys)))

    async def _discover(self, issuer: _Issuer) -> str:
        document = await self._get_json(issuer.url + DISCOVERY_PATH)
        named = document.get("issuer")
        if not isinstance(named, str) or named.rstrip("/") != issuer.url:
            raise ValueError(f"its discovery document names the issuer {quote(named, 100)!r}")
        uri = document.get("jwks_uri")
        if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
            raise ValueError("its discovery document has no http(s) jwks_uri")
        return uri

    async def _get_json(self, url: str) -> dict[str, Any]:
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=self._timeout, headers={"Accept": "application/json"})
        async with self._http.get(url) as response:
            if response.status != 200:
                raise ValueError(f"{url} answered HTTP {response.status}")
            body = bytearray()
            async for chunk in response.content.iter_chunked(64 * 1024):
                body += chunk
                if len(body) > MAX_DOCUMENT_BYTES:
                    raise ValueError(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
        document = json.loads(body)
        if not isinstance(document, dict):
            raise ValueError(f"{url} answered JSON that is not an object")
        return document


def _bearer_token(authorization: str) -> str:
    """The token of `Bearer TOKEN` (scheme in any case); nothing of the value is quoted."""
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        raise Unauthenticated(f"{INVALID}: the authorization value is not `Bearer <token>`")
    if len(token) > MAX_TOKEN_CHARS:
        raise Unauthenticated(f"{INVALID}: the bearer token is longer than {MAX_TOKEN_CHARS} characters")
    return token
