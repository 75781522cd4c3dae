"""Resource names and the Kafka topic names derived from them (gateway.translate.names)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, assume, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from gateway.errors import Code, InvalidArgument
from gateway.settings import Settings, SettingsError
from gateway.translate import names

HYP = hsettings(
    max_examples=200,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

KAFKA_LEGAL = re.compile(r"[A-Za-z0-9._\-]+")
DEFAULT_PREFIX = Settings().internal_prefix

# Valid Pub/Sub names, per the published rules; lengths drawn uniformly so that long names
# (which hit Kafka's limit) are as common as short ones.
_ID_REST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.~+%"
_PROJECT_REST = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.:"


def _sized(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.integers(lo, hi).flatmap(lambda n: st.text(alphabet=alphabet, min_size=n, max_size=n))


def _projects(max_rest: int) -> st.SearchStrategy[str]:
    return st.builds(str.__add__, st.sampled_from(_PROJECT_REST[:62]), _sized(_PROJECT_REST, 0, max_rest))


projects = _projects(29)
long_projects = _projects(99)
ids = st.builds(str.__add__, st.sampled_from(_ID_REST[:52]), _sized(_ID_REST, 2, 254)).filter(
    lambda s: not s.startswith("goog")
)
# A tiny alphabet full of escape-relevant characters, to make collisions likely if possible.
tricky_projects = st.text(alphabet="a_.:d", min_size=1, max_size=8).filter(lambda s: s[0] in "ad")
tricky_ids = st.text(alphabet="a_.~+%tpsdc", min_size=2, max_size=8).map(lambda s: "a" + s)


def topic_name(project: str, tid: str) -> str:
    return f"projects/{project}/topics/{tid}"


def expected_kafka_len(project: str, tid: str) -> int:
    """The escaped length, computed independently of the code under test."""
    return len(project) + sum(c in "_.:" for c in project) + 1 + len(tid) + sum(c in "_~%+" for c in tid)


def assert_kafka_legal(kafka: str) -> None:
    assert KAFKA_LEGAL.fullmatch(kafka), kafka
    assert kafka not in {".", ".."}
    assert 1 <= len(kafka) <= names.KAFKA_TOPIC_MAX


# -- round trip, injectivity, legality ----------------------------------------------------------


@HYP
@given(project=long_projects, tid=ids)
def test_round_trip_or_length_error(project: str, tid: str) -> None:
    name = topic_name(project, tid)
    assert names.topic(name) == name
    if expected_kafka_len(project, tid) > names.KAFKA_TOPIC_MAX:
        with pytest.raises(InvalidArgument, match="249"):
            names.kafka_topic_for(names.TopicName(name))
        return
    kafka = names.kafka_topic_for(names.TopicName(name))
    assert len(kafka) == expected_kafka_len(project, tid)
    assert_kafka_legal(kafka)
    assert names.topic_for_kafka(kafka) == name


@HYP
@given(project=projects, tid=ids)
def test_round_trip_short_projects(project: str, tid: str) -> None:
    assume(expected_kafka_len(project, tid) <= names.KAFKA_TOPIC_MAX)
    name = names.TopicName(topic_name(project, tid))
    kafka = names.kafka_topic_for(name)
    assert_kafka_legal(kafka)
    assert names.topic_for_kafka(kafka) == name


@HYP
@given(p1=tricky_projects, t1=tricky_ids, p2=tricky_projects, t2=tricky_ids)
def test_injective_on_escape_heavy_names(p1: str, t1: str, p2: str, t2: str) -> None:
    n1, n2 = topic_name(p1, t1), topic_name(p2, t2)
    k1 = names.kafka_topic_for(names.topic(n1))
    k2 = names.kafka_topic_for(names.topic(n2))
    assert_kafka_legal(k1)
    assert_kafka_legal(k2)
    assert (k1 == k2) == (n1 == n2)


@HYP
@given(a=st.tuples(projects, ids), b=st.tuples(projects, ids))
def test_injective(a: tuple[str, str], b: tuple[str, str]) -> None:
    assume(a != b)
    assume(expected_kafka_len(*a) <= 249 and expected_kafka_len(*b) <= 249)
    assert names.kafka_topic_for(names.topic(topic_name(*a))) != names.kafka_topic_for(
        names.topic(topic_name(*b))
    )


@pytest.mark.parametrize(
    ("n1", "n2"),
    [
        ("projects/a.b/topics/cde", "projects/a/topics/b.cde"),
        ("projects/a_d/topics/xyz", "projects/a./topics/xyz"),
        ("projects/a_c/topics/xyz", "projects/a:/topics/xyz"),
        ("projects/a/topics/x_tyz", "projects/a/topics/x~yz"),
        ("projects/a/topics/x_pyz", "projects/a/topics/x%yz"),
        ("projects/a/topics/x_syz", "projects/a/topics/x+yz"),
        ("projects/a/topics/x__yz", "projects/a/topics/x_yz"),
        ("projects/a_/topics/dxyz", "projects/a/topics/d_xyz"),
    ],
)
def test_known_near_collisions_stay_distinct(n1: str, n2: str) -> None:
    k1 = names.kafka_topic_for(names.topic(n1))
    k2 = names.kafka_topic_for(names.topic(n2))
    assert k1 != k2
    assert names.topic_for_kafka(k1) == n1
    assert names.topic_for_kafka(k2) == n2


def test_examples() -> None:
    assert names.kafka_topic_for(names.topic("projects/my-proj/topics/orders")) == "my-proj.orders"
    assert (
        names.kafka_topic_for(names.topic("projects/ex.com:p_1/topics/a.b~c+d%e_f-g"))
        == "ex_dcom_cp__1.a.b_tc_sd_pe__f-g"
    )


# -- the Kafka length limit ---------------------------------------------------------------------


def test_length_limit_boundary() -> None:
    ok = names.TopicName(topic_name("p", "a" * 247))  # "p." + 247 = 249
    assert len(names.kafka_topic_for(ok)) == 249
    too_long = names.TopicName(topic_name("p", "a" * 248))
    with pytest.raises(InvalidArgument) as info:
        names.kafka_topic_for(too_long)
    assert info.value.code is Code.INVALID_ARGUMENT
    assert "249" in info.value.message
    assert too_long in info.value.message


def test_length_limit_counts_escapes() -> None:
    name = names.TopicName(topic_name("p", "a" + "_" * 124))  # 127 raw chars, 251 escaped
    assert names.topic(name) == name
    with pytest.raises(InvalidArgument, match="249"):
        names.kafka_topic_for(name)


# -- invalid names ------------------------------------------------------------------------------

INVALID_TOPICS = [
    "",
    "projects/p/topics/ab",  # too short
    "projects/p/topics/a",
    "projects/p/topics/" + "a" * 256,  # too long
    "projects/p/topics/1abc",  # must start with a letter
    "projects/p/topics/-abc",
    "projects/p/topics/_abc",
    "projects/p/topics/ab c",  # bad chars
    "projects/p/topics/ab*c",
    "projects/p/topics/ab/c",
    "projects/p/topics/abé",
    "projects/p/topics/abc\n",
    "projects/p/topics/googabc",  # reserved prefix
    "projects/p/topics/goog",
    "projects/p/subscriptions/abc",  # wrong collection
    "projects/p/snapshots/abc",
    "project/p/topics/abc",
    "Projects/p/topics/abc",
    "projects//topics/abc",  # missing parts
    "projects/p/topics",
    "projects/p/topics/",
    "topics/abc",
    "abc",
    "/projects/p/topics/abc",
    "projects/p/topics/abc/",
    "projects/-p/topics/abc",  # bad project
    "projects/p!/topics/abc",
    "projects/p~/topics/abc",
    "projects/p q/topics/abc",
]


@pytest.mark.parametrize("name", INVALID_TOPICS)
def test_invalid_topic_names(name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        names.topic(name)
    assert info.value.code is Code.INVALID_ARGUMENT
    assert f"Invalid resource name given (name={name})" in info.value.message


@pytest.mark.parametrize("name", INVALID_TOPICS)
def test_kafka_topic_for_rejects_invalid_names(name: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(f"(name={name})")):
        names.kafka_topic_for(names.TopicName(name))


@pytest.mark.parametrize(
    ("func", "good", "bad"),
    [
        (names.subscription, "projects/p/subscriptions/sub", "projects/p/topics/sub"),
        (names.subscription, "projects/p/subscriptions/sub", "projects/p/subscriptions/goog-sub"),
        (names.snapshot, "projects/p/snapshots/snap", "projects/p/subscriptions/snap"),
        (names.snapshot, "projects/p/snapshots/snap", "projects/p/snapshots/s"),
        (names.topic, "projects/p/topics/t.~+%-_x", "projects/p/topics/t.~+%-_x!"),
    ],
)
def test_collections(func, good: str, bad: str) -> None:  # type: ignore[no-untyped-def]
    assert func(good) == good
    with pytest.raises(InvalidArgument, match=re.escape(f"Invalid resource name given (name={bad})")):
        func(bad)


def test_parse() -> None:
    assert names.parse("projects/ex.com:p/topics/abc", "topics") == ("ex.com:p", "abc")


@pytest.mark.parametrize("name", ["projects", "projects/", "projects/p/x", "project/p", "projects/-p"])
def test_project_name_invalid(name: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(f"(name={name})")):
        names.project_name(name)


def test_project_name_valid() -> None:
    assert names.project_name("projects/my-proj.x:y_1") == "my-proj.x:y_1"


@pytest.mark.parametrize("bad", ["noseparator", "p._x", "p_x.abc", "p.abc_"])
def test_topic_for_kafka_rejects_non_gateway_names(bad: str) -> None:
    with pytest.raises(ValueError, match=r"gateway topic name|escaped Pub/Sub name"):
        names.topic_for_kafka(bad)


# -- user-given Kafka topics --------------------------------------------------------------------


@pytest.mark.parametrize("kafka", ["a", "A.b-c_d", "x" * 249, "..."])
def test_check_kafka_topic_ok(kafka: str) -> None:
    assert names.check_kafka_topic(kafka) == kafka


@pytest.mark.parametrize("kafka", ["", ".", "..", "x" * 250, "a b", "a/b", "ä", "a:b"])
def test_check_kafka_topic_bad(kafka: str) -> None:
    with pytest.raises(InvalidArgument, match="249"):
        names.check_kafka_topic(kafka)


# -- gateway-internal topics --------------------------------------------------------------------

subscription_names = st.builds(lambda p, s: f"projects/{p}/subscriptions/{s}", long_projects, ids)
uids = st.one_of(st.just(""), st.from_regex(r"[0-9a-f]{8}", fullmatch=True))
kinds = st.sampled_from(["resources", "acks", "snapshots", "x"])


def assert_no_collision(internal: str) -> None:
    """No valid topic name maps to `internal`: the inverse either fails or leads elsewhere."""
    try:
        candidate = names.topic_for_kafka(internal)
    except ValueError:
        return
    try:
        mapped = names.kafka_topic_for(names.topic(candidate))
    except InvalidArgument:
        return
    assert mapped != internal, f"{candidate} maps to the internal topic {internal}"


@HYP
@given(kind=kinds, name=st.one_of(st.just(""), subscription_names), uid=uids)
def test_internal_topic_default_prefix(kind: str, name: str, uid: str) -> None:
    internal = names.internal_topic(DEFAULT_PREFIX, kind, name, uid)
    assert_kafka_legal(internal)
    assert internal.startswith(f"{DEFAULT_PREFIX}_g{kind}")
    if uid:
        assert internal.endswith(f".{uid}")
    assert_no_collision(internal)


def test_internal_topic_examples() -> None:
    assert names.internal_topic("__pubsub_gateway", "resources") == "__pubsub_gateway_gresources"
    assert (
        names.internal_topic("pfx", "acks", "projects/a.b/subscriptions/s_1", "0123abcd")
        == "pfx_gacks.a_db.s__1.0123abcd"
    )


def test_internal_topic_long_names_are_hashed_and_distinct() -> None:
    a = "projects/" + "p" * 100 + "/subscriptions/" + "s" * 250 + "a"
    b = "projects/" + "p" * 100 + "/subscriptions/" + "s" * 250 + "b"
    ta = names.internal_topic(DEFAULT_PREFIX, "acks", a, "0123abcd")
    tb = names.internal_topic(DEFAULT_PREFIX, "acks", b, "0123abcd")
    for t in (ta, tb):
        assert len(t) == names.KAFKA_TOPIC_MAX
        assert_kafka_legal(t)
        assert t.endswith(".0123abcd")
        assert_no_collision(t)
    assert ta != tb


@pytest.mark.parametrize("prefix", ["a_", "x.y_", "__pubsub_gateway__"])
def test_prefixes_ending_in_underscore_are_rejected(prefix: str) -> None:
    """With such a prefix, '_g' reads as the escape '__' + 'g' and internal topics collide with
    user topics: internal_topic("a_", "acks", "projects/p/subscriptions/sub", "abcd1234") ==
    kafka_topic_for("projects/a_gacks/topics/p.sub.abcd1234") == "a__gacks.p.sub.abcd1234"."""
    with pytest.raises(SettingsError, match="--internal-prefix"):
        Settings(internal_prefix=prefix).validate()


def _accepted_prefix(prefix: str) -> bool:
    try:
        Settings(internal_prefix=prefix).validate()
    except SettingsError:
        return False
    return True


@HYP
@given(
    prefix=st.text(alphabet="a_.-Z9", min_size=1, max_size=12).filter(_accepted_prefix),
    kind=kinds,
    name=st.one_of(
        st.just(""), st.builds(lambda p, s: f"projects/{p}/subscriptions/{s}", tricky_projects, tricky_ids)
    ),
    uid=uids,
)
def test_internal_topic_no_collision_for_any_accepted_prefix(
    prefix: str, kind: str, name: str, uid: str
) -> None:
    internal = names.internal_topic(prefix, kind, name, uid)
    assert_kafka_legal(internal)
    assert_no_collision(internal)
