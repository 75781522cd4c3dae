"""One push request over a shared aiohttp client session, judged as Pub/Sub judges it.

Success is HTTP 102, 200, 201, 202 or 204. Any other status (redirects are not followed), a
connection error, or no answer within the timeout (what is left of the ack deadline) is a
failure: the message is nacked.
"""

from __future__ import annotations

import dataclasses

import aiohttp

from gateway.push.body import SUCCESS_STATUSES, PushRequest

USER_AGENT = "pubsub-kafka-gateway-push"
KEEP_BODY = 64 * 1024  # a response body is read (so the connection is kept) up to this size


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    detail: str  # "HTTP 200", "timeout", "ClientConnectorError: ..."


_SUCCEEDED = {status: Outcome(True, f"HTTP {status}") for status in SUCCESS_STATUSES}  # one each, shared


def client_session(max_connections: int) -> aiohttp.ClientSession:
    """The process's one client: pooled keep-alive connections, TLS verification on."""
    connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, keepalive_timeout=30,
                                     ttl_dns_cache=60)
    return aiohttp.ClientSession(connector=connector, headers={"User-Agent": USER_AGENT},
                                 auto_decompress=False)


async def post(http: aiohttp.ClientSession, url: str, request: PushRequest, time_left: float,
               token: str | None) -> Outcome:
    headers = request.headers
    if token is not None:
        headers = {**headers, "Authorization": f"Bearer {token}"}
    try:
        async with http.post(url, data=request.body, headers=headers, allow_redirects=False,
                             timeout=aiohttp.ClientTimeout(total=max(0.05, time_left))) as resp:
            await resp.content.read(KEEP_BODY)
            return _SUCCEEDED.get(resp.status) or Outcome(False, f"HTTP {resp.status}")
    except TimeoutError:
        return Outcome(False, "timeout")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return Outcome(False, f"{type(exc).__name__}: {exc}")
