"""The push destination policy and URL masking (gateway.translate.endpoints): pure, no sockets.

Tables of addresses in the spellings a URL parser, aiohttp or the C library's resolver accept,
judged under both policies; the IPv4 reader against the C library's own inet_aton.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.translate import endpoints

NEVER, PUBLIC_ONLY, ALLOWED = "never", "public refuses", "allowed"

# (address, verdict): NEVER is refused under both policies, PUBLIC_ONLY only under "public".
ADDRESSES = [
    ("169.254.169.254", NEVER),
    ("169.254.0.1", NEVER),
    ("169.254.170.2", NEVER),  # ECS task metadata
    ("0.0.0.0", NEVER),
    ("0.1.2.3", NEVER),
    ("224.0.0.1", NEVER),
    ("239.255.255.250", NEVER),
    ("255.255.255.255", NEVER),
    ("240.0.0.1", NEVER),
    ("100.100.100.200", NEVER),  # Alibaba Cloud metadata
    ("::", NEVER),
    ("fe80::1", NEVER),
    ("fe80::a9fe:a9fe", NEVER),
    ("fe80::1%eth0", NEVER),
    ("ff02::1", NEVER),
    ("ff0e::1", NEVER),
    ("fd00:ec2::254", NEVER),  # AWS metadata over IPv6
    ("::ffff:169.254.169.254", NEVER),
    ("::ffff:a9fe:a9fe", NEVER),
    ("::ffff:0.0.0.0", NEVER),
    ("::ffff:224.0.0.1", NEVER),
    ("64:ff9b::a9fe:a9fe", NEVER),  # NAT64 of the metadata address
    ("::169.254.169.254", NEVER),  # IPv4-compatible
    ("2002:a9fe:a9fe::1", NEVER),  # 6to4 around it
    ("127.0.0.1", PUBLIC_ONLY),
    ("127.255.255.254", PUBLIC_ONLY),
    ("10.0.0.1", PUBLIC_ONLY),
    ("172.16.0.1", PUBLIC_ONLY),
    ("172.31.255.255", PUBLIC_ONLY),
    ("192.168.1.1", PUBLIC_ONLY),
    ("100.64.0.1", PUBLIC_ONLY),
    ("100.127.255.254", PUBLIC_ONLY),
    ("192.0.2.1", PUBLIC_ONLY),  # documentation
    ("198.18.0.1", PUBLIC_ONLY),  # benchmarking
    ("::1", PUBLIC_ONLY),
    ("fc00::1", PUBLIC_ONLY),
    ("fd12:3456::1", PUBLIC_ONLY),
    ("fec0::1", PUBLIC_ONLY),  # site-local
    ("2001:db8::1", PUBLIC_ONLY),
    ("::ffff:127.0.0.1", PUBLIC_ONLY),
    ("::ffff:10.1.2.3", PUBLIC_ONLY),
    ("64:ff9b::a00:1", PUBLIC_ONLY),  # NAT64 of 10.0.0.1
    ("::127.0.0.1", PUBLIC_ONLY),
    ("8.8.8.8", ALLOWED),
    ("1.1.1.1", ALLOWED),
    ("100.63.255.255", ALLOWED),
    ("100.128.0.0", ALLOWED),
    ("172.32.0.1", ALLOWED),
    ("169.253.255.255", ALLOWED),
    ("223.255.255.255", ALLOWED),
    ("2606:4700:4700::1111", ALLOWED),
    ("2a00:1450:4001::1", ALLOWED),
    ("::ffff:8.8.8.8", ALLOWED),
    ("64:ff9b::808:808", ALLOWED),  # NAT64 of 8.8.8.8, as DNS64 answers on IPv6-only networks
]


def _verdict(address: endpoints.Address) -> str:
    any_, public = endpoints.refusal(address, "any"), endpoints.refusal(address, "public")
    if any_ is not None:
        assert public is not None, "public refuses whatever any refuses"
        return NEVER
    return ALLOWED if public is None else PUBLIC_ONLY


@pytest.mark.parametrize(("text", "verdict"), ADDRESSES)
def test_policy_table(text: str, verdict: str) -> None:
    assert _verdict(ipaddress.ip_address(text)) == verdict


def test_reasons_name_the_range_and_the_policy() -> None:
    why = endpoints.refusal(ipaddress.ip_address("169.254.169.254"), "any")
    assert why == "link-local (the cloud metadata address): never a push destination"
    assert (
        endpoints.refusal(ipaddress.ip_address("127.0.0.1"), "public")
        == "loopback: refused by --push-destinations public"
    )
    mapped = endpoints.refusal(ipaddress.ip_address("::ffff:10.0.0.1"), "public")
    assert mapped == "an IPv6 form of 10.0.0.1, which is private: refused by --push-destinations public"


# Every spelling of the cloud metadata address that a URL can carry and something down the line
# (yarl, aiohttp, getaddrinfo/inet_aton, IDNA) reads as 169.254.169.254.
METADATA_SPELLINGS = [
    "169.254.169.254",
    "0xa9fea9fe",
    "0XA9FEA9FE",
    "2852039166",
    "025177524776",
    "169.254.43518",
    "169.16689662",
    "0251.0376.0251.0376",
    "0xa9.0xfe.0xa9.0xfe",
    "0xa9.254.0251.254",
    "169.254.169.254.",
    "169.254.169.254..",
    "%31%36%39.254.169.254",
    "\u2460\u2465\u2468.\u2461\u2464\u2463.\u2460\u2465\u2468.\u2461\u2464\u2463",
    "\uff11\uff16\uff19\uff0e\uff12\uff15\uff14\uff0e\uff11\uff16\uff19\uff0e\uff12\uff15\uff14",
    "169\u3002254\u3002169\u3002254",
    "[::ffff:169.254.169.254]",
    "::ffff:a9fe:a9fe",
    "0:0:0:0:0:ffff:a9fe:a9fe",
    "::ffff:169.254.169.254",
    "64:ff9b::169.254.169.254",
    "::169.254.169.254",
]


@pytest.mark.parametrize("host", METADATA_SPELLINGS)
def test_every_spelling_of_the_metadata_address_is_read_as_an_address(host: str) -> None:
    address = endpoints.host_address(host)
    assert address is not None
    assert endpoints.refusal(address, "any") is not None
    url = (
        f"http://{host}/computeMetadata/v1/"
        if not host.startswith(":") and ":" not in host[:6]
        else f"http://[{host.strip('[]')}]/computeMetadata/v1/"
    )
    assert endpoints.endpoint_refusal(url, "any") is not None, url


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "example.com",
        "metadata.google.internal",
        "1.2.3.4.5",
        "0x",
        "08.1",
        "1..2",
        "256.1.1.1.",
        "xn--nxasmq6b",
        "a9fea9fe",
        "::g",
    ],
)
def test_names_are_not_addresses(host: str) -> None:
    assert endpoints.host_address(host) is None


@pytest.mark.parametrize(
    ("url", "policy", "refused"),
    [
        ("http://169.254.169.254/latest/meta-data/", "any", True),
        ("http://user:pw@169.254.169.254:8080/", "any", True),
        ("https://[fe80::1%25eth0]:8443/", "any", True),
        ("http://evil\\@169.254.169.254/", "any", True),  # urllib's host; yarl refuses the URL
        ("http://a@b@169.254.169.254/", "any", True),
        ("http://127.0.0.1:8080/push", "any", False),
        ("http://127.0.0.1:8080/push", "public", True),
        ("http://127.1:8080/push", "public", True),
        ("http://0x7f000001/push", "public", True),
        ("http://[::1]:8080/push", "public", True),
        ("http://10.0.0.7/push", "public", True),
        ("http://localhost:8080/push", "public", False),  # a name: judged when pushing
        ("http://push.example.com/", "public", False),
        ("https://8.8.8.8/", "public", False),
        ("http://169.254.169.254@example.com/", "public", False),  # userinfo, not the host
    ],
)
def test_endpoint_refusal(url: str, policy: endpoints.Policy, refused: bool) -> None:
    assert (endpoints.endpoint_refusal(url, policy) is not None) == refused


def test_policy_names() -> None:
    assert [endpoints.policy(p) for p in endpoints.POLICIES] == ["any", "public"]
    with pytest.raises(ValueError, match="any, public"):
        endpoints.policy("private")


def _c_inet_aton(text: str) -> ipaddress.IPv4Address | None:
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        return None


@given(st.text(alphabet="0123456789abcdefxX.", max_size=24))
def test_inet_aton_reads_what_the_c_library_reads(text: str) -> None:
    assert endpoints.inet_aton(text) == _c_inet_aton(text)


@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 4),
    st.lists(st.sampled_from(["d", "o", "x"]), min_size=4, max_size=4),
)
def test_inet_aton_reads_every_base_and_part_count(number: int, count: int, bases: list[str]) -> None:
    sizes = [1] * (count - 1) + [4 - (count - 1)]
    parts, shift = [], 32
    for size, base in zip(sizes, bases, strict=False):
        shift -= 8 * size
        value = (number >> shift) & ((1 << (8 * size)) - 1)
        parts.append({"d": str(value), "o": f"0{value:o}", "x": f"0x{value:x}"}[base])
    text = ".".join(parts)
    assert endpoints.inet_aton(text) == ipaddress.IPv4Address(number) == _c_inet_aton(text)


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("http://user:pw@host/p", "http://***@host/p"),
        ("https://user@host:8443/p", "https://***@host:8443/p"),
        ("http://a@b:c@host/", "http://***@host/"),
        ("http://user:pw@[::1]:80/", "http://***@[::1]:80/"),
        ("http://host/p?token=abc&x=1", "http://host/p?token=***&x=1"),
        (
            "http://host/p?x=1&access_token=a&API_KEY=b&sig=c&password=d",
            "http://host/p?x=1&access_token=***&API_KEY=***&sig=***&password=***",
        ),
        ("http://host/p#secret", "http://host/p#***"),
        ("http://host/p?q=1", "http://host/p?q=1"),
        ("http://host/", "http://host/"),
        ("http://user:pa/ss@host/", "http://***@host/"),  # not a URL with that password: masked anyway
        ("http://user:12/ss@host/x", "http://user:12/***@host/x"),  # host "user", port 12: the rest is masked
        ("http://host/users/@me", "http://host/users/@me"),
        ("http://user:p#w@host/", "http://***@host/"),
        ("http://user:pw@host:notaport/", "http://***@host:notaport/"),
        ("http:user:pw@host", "http:***@host"),
        ("ftp://user:pw@host/", "ftp://***@host/"),
    ],
)
def test_mask(url: str, masked: str) -> None:
    assert endpoints.mask(url) == masked


@given(st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=12))
def test_mask_never_shows_the_password(user: str, password: str) -> None:
    """Credentials percent-encoded as URLs want them; malformed ones are table cases above."""
    quoted = urllib.parse.quote(password, safe="")
    url = f"http://{urllib.parse.quote(user, safe='')}:{quoted}@push.example.com/x?token={quoted}#{quoted}"
    assert endpoints.mask(url) == "http://***@push.example.com/x?token=***#***"


# -- what the core accepts as an endpoint (CreateSubscription, UpdateSubscription and
#    ModifyPushConfig answer INVALID_ARGUMENT with this, gateway.core.subscriptions) ------------


@pytest.mark.parametrize(
    ("url", "policy", "says"),
    [
        ("http://169.254.169.254/", "any", "link-local"),
        ("http://0xa9fea9fe/", "any", "0xa9fea9fe (169.254.169.254) is link-local"),
        ("http://[::ffff:169.254.169.254]/", "any", "IPv6 form of 169.254.169.254"),
        ("http://127.0.0.1:8080/", "public", "loopback: refused by --push-destinations public"),
        ("http://user:s3cret@10.0.0.1/?token=t0ken", "public", "10.0.0.1 is private"),
        ("ftp://user:s3cret@example.com/", "any", "it must be an http or https URL with a host"),
        ("http://evil\\@example.com/", "any", "it must be an http"),  # the sender's yarl refuses it
        ("http:///path", "any", "it must be an http"),
        ("http://host:99999/", "any", "it must be an http"),
        ("http://host/a b", "any", "it must be an http"),
        ("file:///etc/passwd", "any", "it must be an http"),
    ],
)
def test_problems_of_endpoints(url: str, policy: endpoints.Policy, says: str) -> None:
    problem = endpoints.problem(url, policy)
    assert problem is not None and says in problem, problem
    assert "s3cret" not in problem and "t0ken" not in problem


@pytest.mark.parametrize(
    ("url", "policy"),
    [
        ("http://127.0.0.1:8080/push", "any"),
        ("http://localhost/push", "public"),
        ("https://user:pw@push.example.com/x?token=1", "public"),
        ("http://[2606:4700::1]/", "public"),
    ],
)
def test_endpoints_without_problems(url: str, policy: endpoints.Policy) -> None:
    assert endpoints.problem(url, policy) is None


# -- the setting (gateway.settings) ----------------------------------------------------------


def test_push_destinations_flag_and_environment() -> None:
    import argparse

    from gateway.settings import Settings, SettingsError, add_arguments, from_namespace

    def parse(argv: list[str], env: dict[str, str] | None = None) -> Settings:
        parser = argparse.ArgumentParser()
        add_arguments(parser, env=env or {})
        return from_namespace(parser.parse_args(argv))

    assert Settings().push_destinations == "any"
    assert parse([]).push_destinations == "any"
    assert parse(["--push-destinations", "public"]).push_destinations == "public"
    assert parse([], {"PUBSUB_GATEWAY_PUSH_DESTINATIONS": "Public"}).push_destinations == "public"
    assert (
        parse(
            ["--push-destinations", "any"], {"PUBSUB_GATEWAY_PUSH_DESTINATIONS": "public"}
        ).push_destinations
        == "any"
    )
    for bad in ("private", "", "none", "public,any"):
        with pytest.raises(SettingsError, match="--push-destinations"):
            parse(["--push-destinations", bad])
    with pytest.raises(SettingsError, match="--push-destinations"):
        Settings(push_destinations="anywhere").validate()  # type: ignore[arg-type]
