"""The OpenID configuration and the key set of push tokens, served over HTTP.

    GET /.well-known/openid-configuration   {"issuer": ..., "jwks_uri": ".../oauth2/v3/certs", ...}
    GET /oauth2/v3/certs                    {"keys": [{"kty": "RSA", "kid": ..., "n": ..., "e": ...}]}

so a push endpoint verifies tokens with standard libraries (e.g. PyJWT's `PyJWKClient`). The
routes are added to the REST app: they are served on the REST port.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from aiohttp import web

from gateway.push import auth

CACHE_CONTROL = "public, max-age=300"


def add_routes(
    app: web.Application, keys: Callable[[], Sequence[auth.SigningKey]], issuer: Callable[[], str]
) -> None:
    """Serve both documents from `app`; `keys` and `issuer` are read at every request."""

    async def certs(_request: web.Request) -> web.Response:
        return _json(auth.jwks(keys()))

    async def openid(_request: web.Request) -> web.Response:
        return _json(auth.openid_configuration(issuer()))

    app.router.add_get(auth.CERTS_PATH, certs)
    app.router.add_get(auth.OPENID_PATH, openid)


def _json(document: object) -> web.Response:
    return web.Response(
        body=json.dumps(document).encode(),
        content_type="application/json",
        charset="utf-8",
        headers={"Cache-Control": CACHE_CONTROL},
    )
