"""The REST suite and the connection-limit suite again, in the layout each does not run in.

tests/e2e/test_rest.py runs on the suite's gateways, which serve gRPC and REST on one port (the
default); here it runs again with REST on a port of its own (`--rest-port 0`).
tests/e2e/test_connection_limits.py runs with ports of their own; here those of its tests run
again on one shared port (`gw.address` and `gw.rest_address` are one address) whose connections
say which protocol they speak. Left out, and rewritten for the shared port in test_one_port.py,
are the tests whose connections never say it (on a shared port those wait
--first-bytes-timeout-seconds, then close): silent REST and gRPC connections, and the caps filled
with them.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import test_connection_limits as limits
from tests.e2e.test_connection_limits import (
    test_a_slow_body_gets_408_and_the_connection_is_closed,
    test_a_trickled_head_does_not_extend_its_deadline,
    test_an_idle_grpc_connection_is_closed,
    test_calls_past_the_maximum_fail_with_resource_exhausted,
    test_connection_age_and_idleness_never_cut_a_streaming_pull,
    test_half_finished_requests_are_closed_within_the_header_timeout,
)
from tests.e2e.test_rest import (
    test_bad_publish_bodies_are_refused_without_a_write,
    test_bad_requests_outside_the_body,
    test_body_over_10_mib_is_refused,
    test_error_envelope_for_each_status,
    test_full_flow_over_http,
    test_json_round_trip_of_topic_and_subscription,
    test_list_pages_with_tokens,
    test_names_with_reserved_characters,
    test_openapi_document_is_served,
    test_rest_and_grpc_see_each_others_messages,
    test_snapshots_and_seek,
    test_unicode_and_binary_data_round_trip,
    test_wrong_field_types,
)
from tests.gateways import GatewayProcess

pytestmark = pytest.mark.integration

RERUN = (
    test_a_slow_body_gets_408_and_the_connection_is_closed,
    test_a_trickled_head_does_not_extend_its_deadline,
    test_an_idle_grpc_connection_is_closed,
    test_calls_past_the_maximum_fail_with_resource_exhausted,
    test_connection_age_and_idleness_never_cut_a_streaming_pull,
    test_half_finished_requests_are_closed_within_the_header_timeout,
    test_bad_publish_bodies_are_refused_without_a_write,
    test_bad_requests_outside_the_body,
    test_body_over_10_mib_is_refused,
    test_error_envelope_for_each_status,
    test_full_flow_over_http,
    test_json_round_trip_of_topic_and_subscription,
    test_list_pages_with_tokens,
    test_names_with_reserved_characters,
    test_openapi_document_is_served,
    test_rest_and_grpc_see_each_others_messages,
    test_snapshots_and_seek,
    test_unicode_and_binary_data_round_trip,
    test_wrong_field_types,
)


@pytest.fixture(scope="module")
def shared_gateway(kafka_bootstrap: str, log_dir: Path) -> Iterator[GatewayProcess]:
    """test_rest.py's gateway, with REST on a port of its own."""
    gateway = GatewayProcess(kafka_bootstrap, f"two{uuid.uuid4().hex[:6]}", log_dir, "--rest-port", "0")
    gateway.start()
    assert gateway.address != gateway.rest_address
    yield gateway
    gateway.terminate()


@pytest.fixture(scope="module")
def gw(kafka_bootstrap: str, log_dir: Path) -> Iterator[GatewayProcess]:
    """test_connection_limits.py's gateway and limits, on one port."""
    gateway = GatewayProcess(
        kafka_bootstrap,
        f"onelim{uuid.uuid4().hex[:6]}",
        log_dir,
        "--rest-port",
        "shared",
        "--http-max-connections",
        str(limits.HTTP_MAX),
        "--http-header-timeout-seconds",
        str(limits.HEADER_TIMEOUT),
        "--http-body-timeout-seconds",
        str(limits.BODY_TIMEOUT),
        "--http-idle-timeout-seconds",
        str(limits.HTTP_IDLE),
        "--grpc-max-connections",
        str(limits.GRPC_MAX),
        "--grpc-max-concurrent-rpcs",
        str(limits.GRPC_RPCS),
        "--grpc-handshake-timeout-seconds",
        str(limits.GRPC_HANDSHAKE),
        "--grpc-idle-timeout-seconds",
        str(limits.GRPC_IDLE),
        "--grpc-max-connection-age-seconds",
        str(limits.GRPC_AGE),
        "--stream-max-seconds",
        str(limits.STREAM_MAX),
        "--pull-max-wait-seconds",
        "10",
    ).start()
    assert gateway.address == gateway.rest_address
    yield gateway
    gateway.terminate()
