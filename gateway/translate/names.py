"""Resource names of the Pub/Sub API and the Kafka names derived from them.

A Pub/Sub topic `projects/P/topics/T` becomes the Kafka topic `P'.T'`, where `'` is a reversible
escaping of the characters Kafka does not allow. `_` is the escape character: `__` stands for `_`,
`_t` for `~`, `_p` for `%`, `_s` for `+`, and in the project part `_d` for `.` and `_c` for `:`.
The project part therefore never holds a raw `.`, so the first `.` separates the two parts and no
two Pub/Sub topics can map to one Kafka topic. Gateway-internal topics use the sequence `_g`,
which escaping never produces.
"""

from __future__ import annotations

import hashlib
import re
from typing import NewType

from gateway.errors import InvalidArgument, quote

TopicName = NewType("TopicName", str)
SubscriptionName = NewType("SubscriptionName", str)
SnapshotName = NewType("SnapshotName", str)
KafkaTopic = NewType("KafkaTopic", str)

KAFKA_TOPIC_MAX = 249
DELETED_TOPIC = TopicName("_deleted-topic_")

_ID = re.compile(r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}")
_PROJECT = re.compile(r"[A-Za-z0-9][A-Za-z0-9\-_.:]{0,99}")
_ESCAPE_COMMON = {"_": "__", "~": "_t", "%": "_p", "+": "_s"}
_ESCAPE_PROJECT = {**_ESCAPE_COMMON, ".": "_d", ":": "_c"}
_UNESCAPE = {"_": "_", "t": "~", "p": "%", "s": "+", "d": ".", "c": ":"}


def _invalid(name: str) -> InvalidArgument:
    return InvalidArgument(f"Invalid resource name given (name={quote(name)}).")


def parse(name: str, collection: str) -> tuple[str, str]:
    """Split `projects/P/<collection>/ID` into (P, ID), validating both parts."""
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "projects" or parts[2] != collection:
        raise _invalid(name)
    project, rid = parts[1], parts[3]
    if not _PROJECT.fullmatch(project) or not _ID.fullmatch(rid) or rid.startswith("goog"):
        raise _invalid(name)
    return project, rid


def project_name(name: str) -> str:
    """Validate `projects/P` and return P."""
    parts = name.split("/")
    if len(parts) != 2 or parts[0] != "projects" or not _PROJECT.fullmatch(parts[1]):
        raise _invalid(name)
    return parts[1]


def valid_project(project: str) -> bool:
    """Whether `project` is a project id the names of the API may hold."""
    return _PROJECT.fullmatch(project) is not None


def topic(name: str) -> TopicName:
    parse(name, "topics")
    return TopicName(name)


def subscription(name: str) -> SubscriptionName:
    parse(name, "subscriptions")
    return SubscriptionName(name)


def snapshot(name: str) -> SnapshotName:
    parse(name, "snapshots")
    return SnapshotName(name)


def _escape(text: str, table: dict[str, str]) -> str:
    return "".join(table.get(c, c) for c in text)


def _unescape(text: str) -> str:
    out: list[str] = []
    it = iter(text)
    for c in it:
        if c == "_":
            nxt = next(it, "")
            if nxt not in _UNESCAPE:
                raise ValueError(f"not an escaped Pub/Sub name: {text!r}")
            out.append(_UNESCAPE[nxt])
        else:
            out.append(c)
    return "".join(out)


def kafka_topic_for(name: TopicName) -> KafkaTopic:
    """The Kafka topic a gateway-created Pub/Sub topic lives in."""
    project, tid = parse(name, "topics")
    kafka = f"{_escape(project, _ESCAPE_PROJECT)}.{_escape(tid, _ESCAPE_COMMON)}"
    if len(kafka) > KAFKA_TOPIC_MAX:
        raise InvalidArgument(
            f"Topic name {name} maps to the Kafka topic name {kafka[:40]}... of {len(kafka)} "
            f"characters; Kafka allows at most {KAFKA_TOPIC_MAX}. Choose a shorter topic id."
        )
    return KafkaTopic(kafka)


def topic_for_kafka(kafka: str) -> TopicName:
    """The inverse of `kafka_topic_for`."""
    project, sep, tid = kafka.partition(".")
    if not sep:
        raise ValueError(f"not a gateway topic name: {kafka!r}")
    return TopicName(f"projects/{_unescape(project)}/topics/{_unescape(tid)}")


_KAFKA_LEGAL = re.compile(r"[A-Za-z0-9._\-]{1,249}")


def check_kafka_topic(kafka: str) -> KafkaTopic:
    """Validate a user-given Kafka topic name (for adopting an existing topic)."""
    if not _KAFKA_LEGAL.fullmatch(kafka) or kafka in {".", ".."}:
        raise InvalidArgument(
            f"Invalid Kafka topic name {quote(kafka)!r}: Kafka allows 1-249 characters of [a-zA-Z0-9._-]."
        )
    return KafkaTopic(kafka)


def reserved_kafka_topic(kafka: str, internal_prefix: str) -> bool:
    """Topics the API must never reach: Kafka's own (`__consumer_offsets`, `__transaction_state`,
    any `__*`) and the gateway's (resources, push signing keys, lease logs, all under the
    internal prefix)."""
    return kafka.startswith(("__", internal_prefix))


def internal_topic(prefix: str, kind: str, name: str = "", uid: str = "") -> KafkaTopic:
    """A gateway-internal topic: `<prefix>_g<kind>[.<escaped name>][.<uid>]`, hashed if too long."""
    base = f"{prefix}_g{kind}"
    if name:
        project, rid = name.split("/")[1], name.split("/")[3]
        base += f".{_escape(project, _ESCAPE_PROJECT)}.{_escape(rid, _ESCAPE_COMMON)}"
    suffix = f".{uid}" if uid else ""
    if len(base) + len(suffix) > KAFKA_TOPIC_MAX:
        digest = hashlib.blake2b(base.encode(), digest_size=8).hexdigest()
        base = base[: KAFKA_TOPIC_MAX - len(suffix) - 17] + "." + digest
    return KafkaTopic(base + suffix)
