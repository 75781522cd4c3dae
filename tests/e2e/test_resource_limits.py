"""Resource limits and creates that fail half way, on a real broker.

Each refusal gets the status the published API uses and changes no state: the Kafka topics and
consumer groups (seen by a plain Kafka admin client) and the stored resources (seen through the
List RPCs) are what they were before.
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import AlterConfigOpType as AlterConfigOpType  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigEntry as ConfigEntry  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigResource as ConfigResource  # type: ignore[attr-defined]
from confluent_kafka.admin import ConfigSource as ConfigSource  # type: ignore[attr-defined]
from confluent_kafka.admin import NewTopic as NewTopic  # type: ignore[attr-defined]
from google.api_core import exceptions
from google.protobuf import field_mask_pb2

from gateway.translate import names as gw_names
from tests.conftest import GatewayFactory
from tests.e2e.clients import clients
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration


class Kafka:
    """What the cluster holds, as a plain Kafka admin client sees it."""

    def __init__(self, bootstrap: str) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False})

    def topics(self, prefix: str = "") -> set[str]:
        return {t for t in self.admin.list_topics(timeout=30).topics if t.startswith(prefix)}

    def groups(self, prefix: str) -> set[str]:
        listed = self.admin.list_consumer_groups(request_timeout=30).result()
        return {g.group_id for g in listed.valid if g.group_id.startswith(prefix)}

    def create_topic(self, name: str, partitions: int, **config: str) -> None:
        self.admin.create_topics([NewTopic(name, partitions, 1, config=config)])[name].result(30)

    def overrides(self, topic: str) -> dict[str, str]:
        """The configs set on the topic itself."""
        resource = ConfigResource("topic", topic)
        entries = self.admin.describe_configs([resource])[resource].result(30)
        own = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        return {k: e.value for k, e in entries.items() if getattr(e.source, "value", e.source) == own}

    def set_config(self, topic: str, key: str, value: str) -> None:
        entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource("topic", topic, incremental_configs=[entry])
        self.admin.incremental_alter_configs([resource])[resource].result(30)
        shown = self.admin.describe_configs([ConfigResource("topic", topic)])
        assert next(iter(shown.values())).result(30)[key].value == value


class State:
    """Everything a project and a gateway prefix own: equal before and after a refused call."""

    def __init__(self, kafka: Kafka, gw: GatewayProcess, project: str) -> None:
        self.kafka, self.gw, self.project = kafka, gw, project
        self.pub, self.sub = clients(gw)

    def snapshot(self) -> dict[str, set[str]]:
        project = f"projects/{self.project}"
        return {
            "kafka topics": self.kafka.topics(f"{self.project}.")
            | self.kafka.topics(f"{self.gw.prefix}_gacks."),
            "groups": self.kafka.groups(f"{self.gw.prefix}.{project}/"),
            "topics": {t.name for t in self.pub.list_topics(project=project)},
            "subscriptions": {s.name for s in self.sub.list_subscriptions(project=project)},
            "snapshots": {s.name for s in self.sub.list_snapshots(project=project)},
        }

    def assert_is(self, expected: dict[str, set[str]], seconds: float = 10.0) -> None:
        """The state is `expected` (Kafka's metadata may take a moment to show a change)."""
        deadline = time.monotonic() + seconds
        while (now := self.snapshot()) != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        assert now == expected


def _eventually(check: Callable[[], bool], seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.2)


def _project() -> str:
    return f"lim-{uuid.uuid4().hex[:8]}"


def _name(project: str, collection: str, rid: str) -> str:
    return f"projects/{project}/{collection}/{collection[:3]}-{rid}"


def test_the_partition_bomb_is_refused_and_creates_nothing(
    start_gateway: GatewayFactory, kafka_bootstrap: str
) -> None:
    gw = start_gateway("--max-partitions-per-topic", "4", "--default-partitions", "2")
    kafka, project = Kafka(kafka_bootstrap), _project()
    state = State(kafka, gw, project)
    before = state.snapshot()
    topic = _name(project, "topics", "bomb")
    for bad in ("9000", "5", "0", "-1", "1e3", "٣", "4" * 70):
        with pytest.raises(exceptions.InvalidArgument, match="kafka-partitions"):
            state.pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": bad}}, timeout=30)
    # An existing Kafka topic with more partitions than allowed is not adopted either: every
    # subscription would get a lease/ack log as large.
    wide = f"{project}.wide-legacy"
    kafka.create_topic(wide, 5)
    with pytest.raises(exceptions.FailedPrecondition, match="--max-partitions-per-topic"):
        state.pub.create_topic(request={"name": topic, "labels": {"kafka-topic": wide}}, timeout=30)
    state.assert_is({**before, "kafka topics": before["kafka topics"] | {wide}})
    state.pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "4"}})  # the limit is fine
    state.assert_is(
        {
            **before,
            "kafka topics": before["kafka topics"] | {wide, gw_names.kafka_topic_for(topic)},
            "topics": {topic},
        }
    )


def test_the_default_limit_refuses_the_bomb_of_the_report(
    shared_gateway: GatewayProcess, kafka_bootstrap: str
) -> None:
    state = State(Kafka(kafka_bootstrap), shared_gateway, _project())
    before = state.snapshot()
    with pytest.raises(exceptions.InvalidArgument, match=r"1\.\.64"):
        state.pub.create_topic(
            request={"name": _name(state.project, "topics", "bomb"), "labels": {"kafka-partitions": "9000"}},
            timeout=30,
        )
    state.assert_is(before)


def test_a_subscription_of_a_topic_over_a_lowered_limit_is_refused(
    start_gateway: GatewayFactory, kafka_bootstrap: str
) -> None:
    """A topic stored under a higher limit keeps working, but no new lease/ack log of more
    partitions than the gateway now allows is made."""
    prefix = f"lo{uuid.uuid4().hex[:6]}"
    project = _project()
    topic = _name(project, "topics", "wide")
    first = start_gateway("--max-partitions-per-topic", "6", prefix=prefix)
    clients(first)[0].create_topic(request={"name": topic, "labels": {"kafka-partitions": "6"}})
    first.kill()
    gw = start_gateway("--max-partitions-per-topic", "4", prefix=prefix)
    state = State(Kafka(kafka_bootstrap), gw, project)
    before = state.snapshot()
    with pytest.raises(exceptions.FailedPrecondition, match=r"6 partitions.*--max-partitions-per-topic"):
        state.sub.create_subscription(name=_name(project, "subscriptions", "s"), topic=topic, timeout=30)
    state.assert_is(before)
    state.pub.publish(topic, b"still served").result(timeout=30)


def test_quotas_per_project_answer_resource_exhausted_and_change_nothing(
    start_gateway: GatewayFactory, kafka_bootstrap: str
) -> None:
    gw = start_gateway(
        "--max-topics-per-project",
        "3",
        "--max-subscriptions-per-project",
        "3",
        "--max-snapshots-per-project",
        "2",
    )
    project = _project()
    state = State(Kafka(kafka_bootstrap), gw, project)
    pub, sub = state.pub, state.sub
    topics = [_name(project, "topics", f"t{i}") for i in range(4)]
    for t in topics[:3]:
        pub.create_topic(request={"name": t, "labels": {"kafka-partitions": "1"}})
    subs = [_name(project, "subscriptions", f"s{i}") for i in range(4)]
    for s in subs[:3]:
        sub.create_subscription(name=s, topic=topics[0])
    snaps = [_name(project, "snapshots", f"n{i}") for i in range(3)]
    for n in snaps[:2]:
        sub.create_snapshot(name=n, subscription=subs[0])
    _eventually(lambda: [len(v) for v in state.snapshot().values()] == [6, 3, 3, 3, 2])
    full = state.snapshot()

    with pytest.raises(exceptions.ResourceExhausted, match='type="topics-per-project", current=3, maximum=3'):
        pub.create_topic(name=topics[3], timeout=30)
    with pytest.raises(exceptions.ResourceExhausted, match=r"subscriptions-per-project.*--max-subscriptions"):
        sub.create_subscription(name=subs[3], topic=topics[1], timeout=30)
    with pytest.raises(exceptions.ResourceExhausted, match="snapshots-per-project"):
        sub.create_snapshot(name=snaps[2], subscription=subs[0], timeout=30)
    state.assert_is(full)

    # Per project: another one is not affected; a deletion frees a place.
    other = _project()
    pub.create_topic(name=_name(other, "topics", "t"))
    pub.delete_topic(topic=topics[2])
    pub.create_topic(name=topics[3])
    sub.delete_subscription(subscription=subs[2])
    sub.create_subscription(name=subs[3], topic=topics[1])


def _try(call: Callable[[], object]) -> str:
    try:
        call()
    except exceptions.GoogleAPICallError as exc:
        return type(exc).__name__
    return "ok"


def test_two_processes_racing_admit_exactly_the_limit_and_leave_nothing_behind(
    start_gateway: GatewayFactory, kafka_bootstrap: str
) -> None:
    """Creates through two gateway processes at once: the quota is decided by the order of the
    resources log, so exactly 3 are admitted; those refused after making their Kafka topic, lease
    log or group (the last step failed) remove them again."""
    prefix = f"race{uuid.uuid4().hex[:6]}"
    limits = ("--max-topics-per-project", "3", "--max-subscriptions-per-project", "3")
    gws = [start_gateway(*limits, prefix=prefix), start_gateway(*limits, prefix=prefix)]
    kafka, project = Kafka(kafka_bootstrap), _project()
    pubs = [clients(gw)[0] for gw in gws]
    subs = [clients(gw)[1] for gw in gws]

    def create_topic(i: int) -> str:
        return _try(
            lambda: pubs[i % 2].create_topic(
                request={"name": _name(project, "topics", f"t{i}"), "labels": {"kafka-partitions": "1"}},
                timeout=60,
            )
        )

    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        outcomes = list(pool.map(create_topic, range(10)))
    assert sorted(outcomes) == ["ResourceExhausted"] * 7 + ["ok"] * 3, outcomes
    created = {_name(project, "topics", f"t{i}") for i, o in enumerate(outcomes) if o == "ok"}
    for gw in gws:
        State(kafka, gw, project).assert_is(
            {
                "kafka topics": {gw_names.kafka_topic_for(t) for t in created},
                "groups": set(),
                "topics": created,
                "subscriptions": set(),
                "snapshots": set(),
            }
        )

    topic = sorted(created)[0]

    def create_subscription(i: int) -> str:
        return _try(
            lambda: subs[i % 2].create_subscription(
                name=_name(project, "subscriptions", f"s{i}"), topic=topic, timeout=60
            )
        )

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(create_subscription, range(8)))
    assert sorted(outcomes) == ["ResourceExhausted"] * 5 + ["ok"] * 3, outcomes
    for gw in gws:  # three lease logs and groups, of the three subscriptions stored
        state = State(kafka, gw, project)
        _eventually(lambda: [len(v) for v in state.snapshot().values()] == [6, 3, 3, 3, 0])  # noqa: B023


def test_a_create_failing_at_its_last_step_leaves_nothing_behind(
    start_gateway: GatewayFactory, kafka_bootstrap: str
) -> None:
    """The resources topic refuses the record (its max.message.bytes was lowered after the
    gateway started): CreateTopic has made its Kafka topic by then, CreateSubscription its lease
    log, checkpoints and consumer group. All of it goes again."""
    gw = start_gateway()
    kafka, project = Kafka(kafka_bootstrap), _project()
    state = State(kafka, gw, project)
    topic = _name(project, "topics", "t")
    state.pub.create_topic(request={"name": topic, "labels": {"kafka-partitions": "2"}})
    kafka.set_config(gw_names.internal_topic(gw.prefix, "resources"), "max.message.bytes", "3000")
    before = state.snapshot()
    big = {f"k{i:02d}-" + "x" * 58: "v" * 63 for i in range(40)}  # valid labels, about 5 KB
    with pytest.raises(exceptions.InvalidArgument, match="bytes when stored"):
        state.sub.create_subscription(
            request={"name": _name(project, "subscriptions", "s"), "topic": topic, "labels": big}, timeout=60
        )
    with pytest.raises(exceptions.InvalidArgument, match="bytes when stored"):
        state.pub.create_topic(request={"name": _name(project, "topics", "t2"), "labels": big}, timeout=60)
    state.assert_is(before)
    assert before["kafka topics"] == {gw_names.kafka_topic_for(topic)}

    # Adopting sets the retention of the Kafka topic before the record is written: set back.
    for legacy, own in ((f"{project}.legacy-own", {"retention.ms": "3600000"}), (f"{project}.legacy", {})):
        kafka.create_topic(legacy, 1, **own)
        with pytest.raises(exceptions.InvalidArgument, match="bytes when stored"):
            state.pub.create_topic(
                request={
                    "name": _name(project, "topics", "t3"),
                    "message_retention_duration": {"seconds": 7200},
                    "labels": {**big, "kafka-topic": legacy},
                },
                timeout=60,
            )
        # The broker applies a config change after the controller has committed it: a read
        # right after the undo may still see the value before it.
        _eventually(lambda: kafka.overrides(legacy) == own)  # noqa: B023


def test_a_lease_log_kafka_refuses_leaves_nothing_behind(
    start_gateway: GatewayFactory, kafka_bootstrap: str
) -> None:
    """Kafka refuses the lease/ack log (a replication factor the cluster cannot have): the
    create answers at once with what Kafka said, and no group or resource is left."""
    kafka, project = Kafka(kafka_bootstrap), _project()
    prefix = f"rf{uuid.uuid4().hex[:6]}"
    for own in ("resources", "pushkeys"):  # the gateway's own topics, as it would make them
        kafka.create_topic(gw_names.internal_topic(prefix, own), 1, **{"cleanup.policy": "compact"})
    gw = start_gateway("--replication-factor", "100", prefix=prefix)
    state = State(kafka, gw, project)
    legacy = f"{project}.legacy"
    kafka.create_topic(legacy, 2)
    topic = _name(project, "topics", "t")
    state.pub.create_topic(request={"name": topic, "labels": {"kafka-topic": legacy}})
    before = state.snapshot()
    with pytest.raises(exceptions.FailedPrecondition, match="Kafka refused"):
        state.sub.create_subscription(name=_name(project, "subscriptions", "s"), topic=topic, timeout=60)
    state.assert_is(before)


def test_invalid_labels_are_refused_everywhere(shared_gateway: GatewayProcess, kafka_bootstrap: str) -> None:
    state = State(Kafka(kafka_bootstrap), shared_gateway, _project())
    pub, sub, project = state.pub, state.sub, state.project
    topic, subscription = _name(project, "topics", "t"), _name(project, "subscriptions", "s")
    snapshot = _name(project, "snapshots", "n")
    pub.create_topic(request={"name": topic, "labels": {"team": "a", "kafka-partitions": "1"}})
    sub.create_subscription(request={"name": subscription, "topic": topic, "labels": {"team": "a"}})
    sub.create_snapshot(request={"name": snapshot, "subscription": subscription, "labels": {"team": "a"}})
    before = state.snapshot()
    too_many = {f"k{i}": "v" for i in range(65)}
    for labels, match in (
        ({"Team": "a"}, "label key 'Team'"),
        ({"team": "A"}, "value 'A'"),
        ({"9lives": "a"}, "label key"),
        ({"k": "a.b"}, "value 'a.b'"),
        (too_many, "Too many labels: 65"),
    ):
        with pytest.raises(exceptions.InvalidArgument, match=match):
            pub.create_topic(request={"name": _name(project, "topics", "t2"), "labels": labels})
        with pytest.raises(exceptions.InvalidArgument, match=match):
            sub.create_subscription(
                request={"name": _name(project, "subscriptions", "s2"), "topic": topic, "labels": labels}
            )
        with pytest.raises(exceptions.InvalidArgument, match=match):
            sub.create_snapshot(
                request={
                    "name": _name(project, "snapshots", "n2"),
                    "subscription": subscription,
                    "labels": labels,
                }
            )
        mask = field_mask_pb2.FieldMask(paths=["labels"])
        with pytest.raises(exceptions.InvalidArgument, match=match):
            pub.update_topic(request={"topic": {"name": topic, "labels": labels}, "update_mask": mask})
        with pytest.raises(exceptions.InvalidArgument, match=match):
            sub.update_subscription(
                request={"subscription": {"name": subscription, "labels": labels}, "update_mask": mask}
            )
        with pytest.raises(exceptions.InvalidArgument, match=match):
            sub.update_snapshot(
                request={"snapshot": {"name": snapshot, "labels": labels}, "update_mask": mask}
            )
    state.assert_is(before)
    assert dict(pub.get_topic(topic=topic).labels) == {"team": "a", "kafka-partitions": "1"}
    assert dict(sub.get_subscription(subscription=subscription).labels) == {"team": "a"}
    # International lowercase letters are labels too.
    updated = sub.update_subscription(
        request={
            "subscription": {"name": subscription, "labels": {"команда": "ä"}},
            "update_mask": field_mask_pb2.FieldMask(paths=["labels"]),
        }
    )
    assert dict(updated.labels) == {"команда": "ä"}
