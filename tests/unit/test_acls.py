"""The gateway's ACL set and how a refusal of Kafka's authorizer is worded (gateway.kafka.acls)."""

from __future__ import annotations

from confluent_kafka import KafkaError
from hypothesis import given
from hypothesis import strategies as st

from gateway.errors import Code, Unavailable
from gateway.kafka import acls
from gateway.kafka.producer import _translate
from gateway.translate import names
from tests.unit.test_names import DEFAULT_PREFIX, HYP, projects

ids = st.from_regex(r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,40}", fullmatch=True).filter(
    lambda s: not s.startswith("goog")
)


@HYP
@given(projects, ids, ids)
def test_every_kafka_name_the_gateway_makes_falls_under_its_grants(
    project: str, topic: str, sub: str
) -> None:
    grants = acls.gateway_grants(DEFAULT_PREFIX, [project])
    internal, groups, txn, own = grants

    def covered(grant: acls.Grant, name: str) -> bool:
        return name.startswith(grant.name) if grant.prefixed else name == grant.name

    subscription = f"projects/{project}/subscriptions/{sub}"
    log_topic = names.internal_topic(DEFAULT_PREFIX, "acks", subscription, "0123abcd")
    for kind in ("resources", "pushkeys"):
        assert covered(internal, names.internal_topic(DEFAULT_PREFIX, kind))
    assert covered(internal, log_topic)
    # As core/subscriptions.py, core/expiration.py and core/runner.py name them:
    assert covered(groups, f"{DEFAULT_PREFIX}.{subscription}.0123abcd")
    assert covered(groups, f"{DEFAULT_PREFIX}.janitor")
    assert covered(txn, f"{DEFAULT_PREFIX}.{log_topic}.3")
    kafka = names.kafka_topic_for(names.topic(f"projects/{project}/topics/{topic}"))
    assert covered(own, kafka)
    assert not covered(internal, kafka)  # a project's grant never reaches the gateway's topics


def test_the_set_holds_no_cluster_acl_and_only_prefixes() -> None:
    grants = acls.gateway_grants("gw", ["p", "q"])
    assert [g.resource for g in grants] == [
        acls.TOPIC,
        acls.GROUP,
        acls.TRANSACTIONAL_ID,
        acls.TOPIC,
        acls.TOPIC,
    ]
    assert all(g.prefixed for g in grants)
    assert [g.name for g in grants] == ["gw_g", "gw.", "gw.", "p.", "q."]
    assert acls.gateway_grants("gw", adopted_topics=["plain"])[-1] == acls.Grant(
        acls.TOPIC,
        "plain",
        False,
        ("READ", "WRITE", "ALTER_CONFIGS"),
        "the adopted Kafka topic plain (label kafka-topic)",
    )


def test_kafka_acls_commands_spell_operations_as_the_tool_does() -> None:
    grant = acls.Grant(acls.TOPIC, "gw_g", True, ("CREATE", "DESCRIBE_CONFIGS"), "x")
    assert acls.kafka_acls_commands("User:gw", [grant], "b:9093", "admin.properties") == [
        "kafka-acls.sh --bootstrap-server b:9093 --command-config admin.properties --add "
        "--allow-principal User:gw --operation Create --operation DescribeConfigs --topic gw_g "
        "--resource-pattern-type prefixed"
    ]
    literal = acls.Grant(acls.TRANSACTIONAL_ID, "t", False, ("WRITE",), "x")
    assert acls.kafka_acls_commands("User:gw", [literal])[0].endswith(
        "--operation Write --transactional-id t"
    )


def test_a_refusal_names_the_operation_and_resource_of_its_kind() -> None:
    needs = [acls.Need("READ", acls.GROUP, "g"), acls.Need("READ", acls.TOPIC, "t")]
    refused = acls.denial("setting offsets", KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "no"), needs)
    assert refused is not None
    assert refused.code is Code.PERMISSION_DENIED
    assert "READ on group g" in refused.message
    assert "topic t" not in refused.message
    refused = acls.denial("x", KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "no"), needs)
    assert refused is not None
    assert "READ on topic t" in refused.message
    assert acls.denial("x", KafkaError(KafkaError.NOT_COORDINATOR, "busy"), needs) is None


def test_a_refused_write_names_the_topic_or_the_transactional_id() -> None:
    topic = _translate(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "no"), "p.t")
    assert "WRITE on topic p.t" in str(topic)
    txn = _translate(
        KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "no"),
        transactional_id="gw.log.0",
        topics=["p.dead", "gw_gacks.x"],
    )
    assert "WRITE on transactional-id gw.log.0" in str(txn)
    both = _translate(
        KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "no"),
        transactional_id="gw.log.0",
        topics=["p.dead", "gw_gacks.x"],
    )
    assert "WRITE on topic p.dead or gw_gacks.x" in str(both)
    idempotent = _translate(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "no"), "p.t")
    assert "IDEMPOTENT_WRITE on cluster" in str(idempotent)
    assert isinstance(_translate(KafkaError(KafkaError.REQUEST_TIMED_OUT, "slow"), "p.t"), Unavailable)


def test_the_spark_reader_set_reads_and_acks_only() -> None:
    grants = acls.spark_grants("gw", ["p"])
    assert {(g.name, g.operations) for g in grants} == {
        ("gw_gresources", ("READ",)),
        ("gw_gacks.", ("READ", "WRITE")),
        ("gw.", ("DESCRIBE",)),
        ("p.", ("READ",)),
    }
    assert ("gw_gacks.", ("READ",)) in {(g.name, g.operations) for g in acls.spark_grants("gw", acks=False)}


def test_the_spark_set_with_publish_writes_the_projects_topics() -> None:
    grants = {(g.name, g.operations) for g in acls.spark_grants("gw", ["p", "q"], publish=True)}
    assert ("p.", ("READ", "WRITE")) in grants
    assert ("q.", ("READ", "WRITE")) in grants
    assert ("gw_gresources", ("READ",)) in grants
