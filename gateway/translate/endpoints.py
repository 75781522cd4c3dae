"""Push endpoint URLs: which destinations the gateway may push to, and their masking for logs.

Pure functions on values (no I/O); the sender applies `refusal` to every address it is about to
connect to, and the core applies `problem` to the endpoints CreateSubscription,
UpdateSubscription and ModifyPushConfig set.

The destination policy (`--push-destinations`, docs/push.md "Destinations"):
- Refused always: unspecified and "this network" addresses (0.0.0.0/8, ::; Linux connects
  0.0.0.0 to the local host), link-local (169.254.0.0/16 with the cloud metadata address
  169.254.169.254, fe80::/10), multicast, 240.0.0.0/4 with the broadcast address, and the metadata
  addresses outside those ranges (AWS's IPv6 fd00:ec2::254, Alibaba Cloud's 100.100.100.200).
- `any` (the default) allows everything else, loopback and private networks included.
- `public` also refuses what is not globally reachable: loopback, private networks (RFC 1918,
  fc00::/7), shared address space (100.64.0.0/10), site-local, reserved and documentation
  ranges: every address Python's `ipaddress` does not call global.
An IPv6 address that carries an IPv4 address (IPv4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::/96,
IPv4-compatible ::a.b.c.d, 6to4, Teredo) is refused when the IPv4 address is; mapped and NAT64
addresses are judged as their IPv4 address alone, since that is where their packets go.

A URL's host is read as an address in every spelling the system's resolver accepts for IPv4
(inet_aton: 2852039166, 0xa9fea9fe, 0251.0376.0251.0376, 169.254.43518, ...), after percent-
and IDNA-style normalisation (fullwidth digits and dots), so that a literal refused address is
refused when the endpoint is set. Names are judged only by the addresses they resolve to when a
push is sent.
"""

from __future__ import annotations

import ipaddress
import unicodedata
import urllib.parse
from typing import Final, Literal

import yarl

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Policy = Literal["any", "public"]
POLICIES: Final = ("any", "public")
DEFAULT_POLICY: Final[Policy] = "any"

_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")
_FUTURE_USE = ipaddress.IPv4Network("240.0.0.0/4")
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_CLOUD_METADATA = ipaddress.IPv4Address("169.254.169.254")  # AWS, GCP, Azure, Oracle, OpenStack
_METADATA = {
    ipaddress.IPv6Address("fd00:ec2::254"): "the AWS instance metadata service",
    ipaddress.IPv4Address("100.100.100.200"): "the Alibaba Cloud metadata service",
}
_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})  # IDNA's other full stops
_DIGITS = {10: frozenset("0123456789"), 8: frozenset("01234567"), 16: frozenset("0123456789abcdef")}
_SECRET_PARAMS = ("token", "key", "secret", "pass", "pwd", "auth", "sig", "credential", "session")
MASK = "***"


def policy(name: str) -> Policy:
    """The policy called `name`; ValueError for any other name."""
    if name == "any":
        return "any"
    if name == "public":
        return "public"
    raise ValueError(f"unknown push destination policy {name!r}: it must be one of {', '.join(POLICIES)}")


def refusal(address: Address, policy: Policy) -> str | None:
    """Why `policy` refuses pushes to `address` ("link-local: never a push destination"), or
    None when it allows them."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = _embedded_ipv4(address)
        if inner is not None:
            why = refusal(inner, policy)
            if why is not None:
                return f"an IPv6 form of {inner}, which is {why}"
            if address.ipv4_mapped is not None or address in _NAT64:
                return None  # its packets go to the IPv4 address, which is allowed
    why = _never(address)
    if why is not None:
        return f"{why}: never a push destination"
    if policy == "public":
        why = _not_public(address)
        if why is not None:
            return f"{why}: refused by --push-destinations public"
    return None


def _never(a: Address) -> str | None:
    if a in _METADATA:
        return _METADATA[a]
    if a.is_unspecified:
        return "unspecified"
    if isinstance(a, ipaddress.IPv4Address):
        if a in _THIS_NETWORK:
            return "'this network' (0.0.0.0/8)"
        if a == _BROADCAST:
            return "broadcast"
        if a in _FUTURE_USE:
            return "reserved (240.0.0.0/4)"
    if a.is_link_local:
        return "link-local (the cloud metadata address)" if a == _CLOUD_METADATA else "link-local"
    if a.is_multicast:
        return "multicast"
    return None


def _not_public(a: Address) -> str | None:
    if a.is_loopback:
        return "loopback"
    if isinstance(a, ipaddress.IPv4Address) and a in _SHARED:
        return "shared address space (100.64.0.0/10, carrier-grade NAT)"
    if a.is_private:
        return "private"
    if isinstance(a, ipaddress.IPv6Address) and a.is_site_local:
        return "site-local"
    if a.is_reserved:
        return "reserved"
    if not a.is_global:
        return "not globally reachable"
    return None


def _embedded_ipv4(a: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries and sends its packets towards, if any."""
    if a.ipv4_mapped is not None:
        return a.ipv4_mapped
    if a in _NAT64:
        return ipaddress.IPv4Address(int(a) & 0xFFFFFFFF)
    if a.sixtofour is not None:
        return a.sixtofour
    if a.teredo is not None:
        return a.teredo[1]  # the client's address
    if a in _IPV4_COMPATIBLE and int(a) > 1:  # not :: and ::1, which are themselves
        return ipaddress.IPv4Address(int(a))
    return None


def host_address(host: str) -> Address | None:
    """The address `host` (a URL's host, as a URL parser gives it) is, or None for a name."""
    h = urllib.parse.unquote(host)
    h = unicodedata.normalize("NFKC", h).translate(_DOTS).strip().lower()
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    if ":" in h:
        try:
            return ipaddress.IPv6Address(h)  # a zone ("%eth0") is kept as the scope id
        except ValueError:
            return None
    return inet_aton(h.rstrip("."))  # a trailing dot makes an address a name: judged as one


def inet_aton(text: str) -> ipaddress.IPv4Address | None:
    """An IPv4 address in any form the C library's inet_aton (and so getaddrinfo) reads: one to
    four parts, each decimal, octal (leading 0) or hexadecimal (0x); the last part fills the
    bytes left. None for anything else."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        if part[:2] in ("0x", "0X"):
            digits, base = part[2:].lower(), 16
        elif len(part) > 1 and part[0] == "0":
            digits, base = part[1:], 8
        else:
            digits, base = part, 10
        if not digits or not set(digits) <= _DIGITS[base]:
            return None
        values.append(int(digits, base))
    *head, last = values
    if any(v > 255 for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    number = last
    for i, v in enumerate(head):
        number |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def url_hosts(url: str) -> set[str]:
    """The host of `url` as each URL parser that reads it here sees it: urllib's (the core's
    check) and yarl's (what aiohttp connects to, after IDNA). Parsers that fail are left out."""
    hosts: set[str] = set()
    try:
        host = urllib.parse.urlsplit(url).hostname
        if host:
            hosts.add(host)
    except ValueError:
        pass
    try:
        raw = yarl.URL(url).raw_host
        if raw:
            hosts.add(raw)
    except (ValueError, TypeError):
        pass
    return hosts


def problem(url: str, policy: Policy) -> str | None:
    """What is wrong with `url` as a push endpoint, or None: it must be an http or https URL
    with a host for urllib and for yarl (what the sender parses it with), without whitespace,
    whose host is no address `policy` refuses."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
        sent = yarl.URL(url)
    except (ValueError, TypeError):
        return _NOT_A_URL
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or not sent.raw_host
        or any(c.isspace() for c in url)
    ):
        return _NOT_A_URL
    return endpoint_refusal(url, policy)


_NOT_A_URL = "it must be an http or https URL with a host"


def endpoint_refusal(url: str, policy: Policy) -> str | None:
    """Why `policy` refuses the endpoint `url` whatever names resolve to: its host is an address
    the policy refuses. None when it may be pushed to (names are judged when pushing)."""
    for host in sorted(url_hosts(url)):
        address = host_address(host)
        if address is not None:
            why = refusal(address, policy)
            if why is not None:
                spelled = "" if str(address) == host else f" ({address})"
                return f"its host {host}{spelled} is {why}"
    return None


def host_port(endpoint: str) -> tuple[str, int]:
    """(host, port) of a gRPC push endpoint of the seed's early API, "host:port" or "[v6]:port"
    (the brackets dropped); ValueError for anything else."""
    host, sep, port_text = endpoint.rpartition(":")
    bracketed = host.startswith("[") and host.endswith("]")
    if bracketed:
        host = host[1:-1]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{endpoint!r} is not host:port: {host!r} is no IPv6 address") from None
    if not sep or not host or (":" in host and not bracketed):
        raise ValueError(f"{endpoint!r} is not host:port")
    if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{endpoint!r} has no port between 1 and 65535")
    if any(c.isspace() or c in "/@?#[]" for c in host):
        raise ValueError(f"{endpoint!r} is not host:port")
    return host, int(port_text)


def grpc_problem(endpoint: str, policy: Policy) -> str | None:
    """What is wrong with `endpoint` as a gRPC push endpoint (host:port), or None: the check of
    `problem` for the seed's early API, whose endpoints are no URLs. Names are judged when
    pushing (push/grpc_push.py)."""
    try:
        host, _ = host_port(endpoint)
    except ValueError as exc:
        return str(exc)
    address = host_address(host)
    why = None if address is None else refusal(address, policy)
    if why is None:
        return None
    spelled = "" if str(address) == host else f" ({address})"
    return f"its host {host}{spelled} is {why}"


def mask(url: str) -> str:
    """`url` fit for a log line or an error: the user and password are replaced by ***, and so
    are what precedes an "@" in a path segment, the values of query parameters whose names
    suggest a secret (token, key, sig, ...) and the fragment (never sent). A URL that does not
    parse loses everything between "//" and its last "@"."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return _mask_anyway(url)
    if not parts.netloc:
        return _mask_anyway(url)  # no authority ("http:user:pw@host"): not a push endpoint anyway
    netloc = parts.netloc
    if "@" in netloc:
        netloc = MASK + netloc[netloc.rindex("@") :]
    # "@" in the path: what precedes it in its segment may be the rest of a password that held
    # a "/" ("http://user:12/ss@host/" is host "user", port 12, path "/ss@host/")
    path = "/".join(_mask_before_at(segment) for segment in parts.path.split("/"))
    query = "&".join(_mask_param(p) for p in parts.query.split("&")) if parts.query else ""
    fragment = MASK if parts.fragment else ""
    if (netloc, path, query, fragment) == (parts.netloc, parts.path, parts.query, parts.fragment):
        return url
    return urllib.parse.urlunsplit((parts.scheme, netloc, path, query, fragment))


def _mask_before_at(segment: str) -> str:
    at = segment.rfind("@")
    return segment if at <= 0 else MASK + segment[at:]


def _mask_param(param: str) -> str:
    name, sep, value = param.partition("=")
    secret = any(word in urllib.parse.unquote_plus(name).lower() for word in _SECRET_PARAMS)
    return f"{name}={MASK}" if sep and value and secret else param


def _mask_anyway(url: str) -> str:
    at = url.rfind("@")
    if at >= 0:
        slashes = url.find("//")
        start = slashes + 2 if 0 <= slashes < at else url.find(":") + 1  # after "//", else the scheme
        url = url[:start] + MASK + url[at:]
    rest, hash_, fragment = url.partition("#")
    base, question, query = rest.partition("?")
    if question:
        base += question + "&".join(_mask_param(p) for p in query.split("&"))
    return base + (hash_ + MASK if fragment else hash_)
