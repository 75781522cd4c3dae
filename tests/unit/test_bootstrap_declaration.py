"""Reading what --bootstrap-file and --bootstrap declare (gateway/bootstrap/declaration.py): the
API's field names, short ids resolved in their project, and every refusal naming the file and
the line. No broker: what the values mean is the in-process tier's (tests/inprocess/test_bootstrap.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from gateway import settings as settings_mod
from gateway._pb.google.pubsub.v1 import pubsub_pb2 as pb
from gateway._pb.google.pubsub.v1 import schema_pb2
from gateway.bootstrap import BootstrapError, load, read_file, short_form


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bootstrap.yaml"
    path.write_text(text)
    return path


def _refusal(tmp_path: Path, text: str) -> str:
    path = _file(tmp_path, text)
    with pytest.raises(BootstrapError) as caught:
        read_file(path)
    message = caught.value.message
    assert message.startswith(f"--bootstrap-file {path}"), message
    return message.removeprefix(f"--bootstrap-file {path}, ")


SHOP = "projects:\n  - id: shop\n"


def test_fields_take_the_apis_json_names_and_short_ids_resolve_in_their_project(tmp_path: Path) -> None:
    declared = read_file(
        _file(
            tmp_path,
            SHOP
            + """    topics:
      - name: orders
        messageRetentionDuration: 3600s
        schemaSettings: {schema: order, encoding: BINARY}
    subscriptions:
      - name: worker
        topic: orders
        ack_deadline_seconds: 20
        deadLetterPolicy: {deadLetterTopic: projects/other/topics/dead, maxDeliveryAttempts: 7}
        pushConfig: {pushEndpoint: "https://example.com/push", noWrapper: {writeMetadata: true}}
        retryPolicy: null
""",
        )
    )
    (topic,) = declared.topics
    assert topic.message.name == "projects/shop/topics/orders" and topic.where.line == 4
    assert topic.message.schema_settings.schema == "projects/shop/schemas/order"
    assert topic.message.schema_settings.encoding == schema_pb2.BINARY
    (sub,) = declared.subscriptions
    want = pb.Subscription(
        name="projects/shop/subscriptions/worker",
        topic="projects/shop/topics/orders",
        ack_deadline_seconds=20,
        dead_letter_policy=pb.DeadLetterPolicy(
            dead_letter_topic="projects/other/topics/dead", max_delivery_attempts=7
        ),
        push_config=pb.PushConfig(
            push_endpoint="https://example.com/push", no_wrapper=pb.PushConfig.NoWrapper(write_metadata=True)
        ),
    )
    assert sub.message == want
    # null names the field (an update clears it) without setting it
    assert sub.named == {
        "name",
        "topic",
        "ack_deadline_seconds",
        "dead_letter_policy",
        "push_config",
        "retry_policy",
    }
    assert sub.lines["retry_policy"] == 13 and sub.where_of("push_config").line == 12


def test_a_schema_reads_its_definition_inline_or_from_a_file_beside_this_one(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "a.avsc").write_text('{"type": "string"}')
    text = SHOP + (
        "    schemas:\n"
        "      - {name: from-file, type: AVRO, definitionFile: schemas/a.avsc}\n"
        "      - name: inline\n        type: PROTOCOL_BUFFER\n        definition: |\n"
        '          syntax = "proto3";\n          message M { string id = 1; }\n'
    )
    first, second = read_file(_file(tmp_path, text)).schemas
    assert first.message == schema_pb2.Schema(
        name="projects/shop/schemas/from-file", type="AVRO", definition='{"type": "string"}'
    )
    assert second.message.definition.startswith('syntax = "proto3";\nmessage M')
    both = SHOP + "    schemas:\n      - name: twice\n        definition: x\n        definitionFile: a.avsc\n"
    (tmp_path / "a.avsc").write_text("{}")
    assert _refusal(tmp_path, both).startswith("line 6: give definition or definitionFile, not both")
    missing = SHOP + "    schemas:\n      - name: gone\n        definitionFile: nowhere.avsc\n"
    assert _refusal(tmp_path, missing).startswith("line 5: cannot read definitionFile")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            SHOP + "    topics:\n      - name: orders\n        lables: {a: b}\n",
            "line 5: a topic has no field 'lables'; its fields are name, labels,",
        ),
        (
            SHOP
            + "    subscriptions:\n      - name: worker\n        topic: orders\n        deadLetterPolicy:\n          maxDeliveryAttempts: many\n",
            "line 7: subscription.deadLetterPolicy.maxDeliveryAttempts: invalid literal",
        ),
        (
            SHOP
            + "    subscriptions:\n      - name: worker\n        topic: orders\n        deadLetterPolicy:\n          deadLetterTopik: x\n",
            "line 7: subscription.deadLetterPolicy has no field 'deadLetterTopik'",
        ),
        (
            SHOP + "    topics:\n      - name: orders\n        name: again\n",
            "line 5: 'name' is given twice (also at line 4)",
        ),
        (
            SHOP + "    topics:\n      - name: orders\n        labels: {}\n        labels: {}\n",
            "line 6: 'labels' is given twice",
        ),
        (
            SHOP
            + "    topics:\n      - name: orders\n        message_retention_duration: 600s\n        messageRetentionDuration: 600s\n",
            "line 6: messageRetentionDuration is given twice (also at line 5)",
        ),
        (SHOP + "    topics:\n      - name: [orders\n", "line 5: not YAML or JSON"),
        (
            SHOP + "    topics:\n      - name: orders\n        state: ACTIVE\n",
            "line 5: state is set by the service",
        ),
        (
            SHOP
            + "    subscriptions:\n      - name: worker\n        topic: orders\n        topicMessageRetentionDuration: 600s\n",
            "line 6: topicMessageRetentionDuration is set by the service",
        ),
        (
            SHOP + "    topics:\n      - name: orders\n        messageRetentionDuration: 600\n",
            "line 5: topic.messageRetentionDuration: Duration JSON value not a string",
        ),
        (
            SHOP + "    topics:\n      - name: orders\n        labels: {since: 2024-01-01}\n",
            "line 5: topic.labels: '2024-01-01' is a YAML date: quote it",
        ),
        (
            SHOP + "    topics:\n      - name: orders\n        schemaSettings: {schema: s, encoding: XML}\n",
            "line 5: topic.schemaSettings.encoding: Invalid enum value XML",
        ),
        (
            SHOP + "    topics:\n      - name: orders\n        labels: [a, b]\n",
            "line 5: topic.labels: Map field labels must be in a dict",
        ),
        (
            SHOP + "    topics:\n      - name: go\n",
            "line 4: Invalid resource name given (name=projects/shop/topics/go).",
        ),
        (
            SHOP + "    topics:\n      - name: projects/elsewhere/topics/orders\n",
            "line 4: projects/elsewhere/topics/orders is not in the project shop",
        ),
        (SHOP + "    topics:\n      - labels: {a: b}\n", "line 4: each topic needs its name"),
        (
            SHOP + "    topics:\n      - name: orders\n        delete: true\n        labels: {}\n",
            "line 6: unknown key 'labels' of a topic to delete",
        ),
        (
            SHOP + "    topics:\n      - name: orders\n        delete: yes please\n",
            "line 5: delete is true or false",
        ),
        (
            SHOP + "    subscriptions:\n      - name: worker\n        ackDeadlineSeconds: 20\n",
            "line 4: a subscription needs its topic",
        ),
        (
            SHOP + "    topic:\n      - name: orders\n",
            "line 3: unknown key 'topic' in a project; the keys are id, schemas, topics, subscriptions",
        ),
        (SHOP + "    topics: orders\n", "line 3: topics holds a list"),
        ("projects:\n  - topics: []\n", "line 2: a project needs its id"),
        ("projects:\n  - id: no/slash\n", "line 2: a project needs its id"),
        ("project: shop\n", "line 1: unknown key 'project'; the keys are projects"),
        ("- a\n- b\n", "line 1: the file holds a mapping"),
        (
            '{"projects": [{"id": "shop", "topics": [{"name": "orders", "bogus": 1}]}]}',
            "line 1: a topic has no field 'bogus'",
        ),
    ],
)
def test_each_refusal_names_the_line_at_fault(tmp_path: Path, text: str, says: str) -> None:
    assert _refusal(tmp_path, text).startswith(says), _refusal(tmp_path, text)


def test_a_file_that_cannot_be_read_is_said_so(tmp_path: Path) -> None:
    with pytest.raises(BootstrapError, match=r"^--bootstrap-file .*nowhere.yaml: cannot read it"):
        read_file(tmp_path / "nowhere.yaml")
    assert len(read_file(_file(tmp_path, "# nothing yet\n"))) == 0


def test_the_short_form_is_the_community_images_convention() -> None:
    declared = short_form(" shop , orders : orders-worker : orders-audit , invoices ,")
    assert [t.name for t in declared.topics] == [
        "projects/shop/topics/orders",
        "projects/shop/topics/invoices",
    ]
    assert [(s.name, s.message.topic) for s in declared.subscriptions] == [
        ("projects/shop/subscriptions/orders-worker", "projects/shop/topics/orders"),
        ("projects/shop/subscriptions/orders-audit", "projects/shop/topics/orders"),
    ]
    assert declared.subscriptions[0].named == {"name", "topic"}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("no/project,orders", "is not a project id"),
        ("shop", "it names no topic"),
        ("shop,orders:worker+localhost#8030", "item 'orders:worker+localhost#8030': a push subscription"),
        ("shop,or", "item 'or': Invalid resource name given"),
    ],
)
def test_the_short_form_refuses_naming_its_entry_and_item(text: str, says: str) -> None:
    with pytest.raises(BootstrapError) as caught:
        short_form(text)
    assert caught.value.message.startswith(f"--bootstrap {text!r}"), caught.value.message
    assert says in caught.value.message


def test_a_resource_named_twice_is_one_entry_unless_they_disagree(tmp_path: Path) -> None:
    path = _file(tmp_path, SHOP + "    topics:\n      - name: orders\n        labels: {team: shop}\n")
    declared = load(path, ["shop,orders:worker", "shop,orders:other"])
    (topic,) = declared.topics  # the file's settings, the short forms' existence
    assert topic.message.labels == {"team": "shop"} and topic.where.line == 4
    assert len(declared.subscriptions) == 2
    with pytest.raises(
        BootstrapError,
        match=r"'shop,invoices:worker'.*declared otherwise at --bootstrap 'shop,orders:worker'",
    ):
        load(None, ["shop,orders:worker", "shop,invoices:worker"])
    deleting = _file(tmp_path, SHOP + "    topics:\n      - name: orders\n        delete: true\n")
    with pytest.raises(BootstrapError, match="declared otherwise at --bootstrap-file"):
        load(deleting, ["shop,orders"])


def _parsed(env: dict[str, str], *argv: str) -> settings_mod.Settings:
    parser = argparse.ArgumentParser()
    settings_mod.add_arguments(parser, env)
    return settings_mod.from_namespace(parser.parse_args(list(argv)))


def test_the_short_form_comes_from_the_flag_its_variable_and_the_community_variables() -> None:
    env = {
        "PUBSUB_PROJECT2": "two,t2x",
        "PUBSUB_PROJECT10": "ten,t10",
        "PUBSUB_PROJECT1": "one,t1x:s1x",
        "PUBSUB_PROJECT_ID": "not-a-declaration",  # the client libraries' project variable
        "PUBSUB_PROJECT0": "zero,t0x",  # numbers start at 1, as the images count
        "PUBSUB_GATEWAY_BOOTSTRAP": "own,a1x; own2,b1x\nown3,c1x",
    }
    settings = _parsed(env, "--bootstrap", "flag,f1x")
    assert settings.bootstrap == (
        "one,t1x:s1x",
        "two,t2x",
        "ten,t10",
        "own,a1x",
        "own2,b1x",
        "own3,c1x",
        "flag,f1x",
    )
    assert _parsed({}).bootstrap == ()
    file = _parsed({"PUBSUB_GATEWAY_BOOTSTRAP_FILE": "boot.yaml"}).bootstrap_file
    assert file == Path("boot.yaml")
