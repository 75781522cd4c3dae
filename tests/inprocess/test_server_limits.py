"""The gRPC server's message limit is the one responses are cut under."""

from __future__ import annotations

from gateway.settings import Settings
from gateway.translate.records import MAX_GRPC_MESSAGE
from gateway.wire.connections import MAX_MESSAGE


def test_the_server_sends_and_takes_what_responses_are_cut_under() -> None:
    assert MAX_MESSAGE == MAX_GRPC_MESSAGE
    assert Settings().pull_response_max_bytes <= MAX_MESSAGE
