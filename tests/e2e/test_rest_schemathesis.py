"""Property-based run of schemathesis against the gateway's own OpenAPI document.

Every operation of /v1/openapi.json gets a bounded number of generated requests, valid ones
and invalid ones; no response may be a server error or disagree with the document in status
code, content type or body schema.

(schemathesis' lazy pytest integration does not run on pytest 9, so the operations are driven
here with its Python API: one bounded Hypothesis run per operation and generation mode.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode, checks
from schemathesis.specs.openapi import checks as openapi_checks

from gateway.translate.unsupported import MARK as REFUSED_SETTING
from tests.conftest import GatewayFactory

pytestmark = pytest.mark.integration
EXAMPLES_PER_OPERATION = 20  # per generation mode: 24 operations x 2 modes x 20 requests, ~30 s
CONFIG = schemathesis.Config.from_dict({"request-timeout": 20})


def not_a_server_error(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """schemathesis' check, except for the one 5xx that is a served method's own answer: 501
    (UNIMPLEMENTED) refusing a setting the gateway cannot act on, naming it (docs/fields.md).
    Generated topic and subscription bodies set BigQuery exports and message transforms."""
    if response.status_code == 501 and REFUSED_SETTING in response.text:
        return None
    return checks.not_a_server_error(ctx, response, case)


CHECKS = [
    not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
]
RUN = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    database=None,
    derandomize=True,  # the same requests every run; failures are reproducible
    phases=[Phase.explicit, Phase.generate],  # no shrinking: keeps a failing run bounded too
    suppress_health_check=list(HealthCheck),
)


def _bounded_run(operation: schemathesis.APIOperation, mode: GenerationMode) -> Callable[[], None]:
    @RUN
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case: schemathesis.Case) -> None:
        case.call_and_validate(checks=CHECKS)

    return run


def test_rest_conforms_to_its_openapi_document(start_gateway: GatewayFactory) -> None:
    gw = start_gateway()
    schema = schemathesis.openapi.from_url(f"http://{gw.rest_address}/v1/openapi.json", config=CONFIG)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert (
        len(operations) == 46
    )  # every HTTP rule of Publisher, Subscriber and SchemaService, and 12 of IAMPolicy
    failures: list[str] = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _bounded_run(operation, mode)()
            except (Exception, ExceptionGroup) as exc:
                failures.append(f"{operation.label} ({mode.value}): {exc}")
    assert not failures, "\n\n".join(failures)
