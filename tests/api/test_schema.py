"""The published OpenAPI schema, exercised by schemathesis in-process (WSGI): for every operation,
generated valid and invalid requests never get a 5xx, and every answer matches the schema (status
code, content type, headers, body). Operations on one record also run against records that exist
(a review case with a finding and a recheck plan, a batch), so their success answers are checked too."""

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.site import api
from api.tokens import SCOPES, token_create
from config.wsgi import application

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
OPERATIONS = [
    (method.upper(), path)
    for path, operations in api.get_openapi_schema(path_prefix="/api/v1")["paths"].items()
    for method in operations
]


@pytest.fixture
def published(db, settings):
    """The schema as the running application publishes it, fetched through its WSGI entry point."""
    settings.LEITSTAND_API_RATE_PER_MINUTE = 1_000_000
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "localhost"]
    # Like Django's test client: a request must not close the test's connection (and its transaction).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def existing(db):
    """A review case with its finding and an active recheck plan."""
    from jobs.batches import batch_create
    from rechecks.services import plan_request
    from tests.console.test_console import review_case
    from workers.pipeline.services import source_upsert

    case = review_case("schema")
    plan = plan_request(job=case, finding=case.findings.get(), content_hash="h")
    batch, _ = batch_create(key="schema", name="schema", created_by="test")
    source = source_upsert(name="schema", base_url="http://127.0.0.1:9/")
    return {"job_id": str(case.pk), "plan_id": plan.pk, "batch_id": batch.pk, "source_id": source.pk}


@pytest.mark.parametrize(
    "method,path,mode",
    [
        *[(method, path, mode) for method, path in OPERATIONS for mode in ("positive", "negative")],
        *[(method, path, "existing") for method, path in OPERATIONS if "{" in path],
    ],
)
def test_every_generated_request_gets_an_answer_within_the_schema(published, existing, method, path, mode):
    assert len(OPERATIONS) == len(list(published.get_all_operations())), "the published schema is the code's"
    operation = published[path][method]
    _, clear = token_create(name="schemathesis", scopes=sorted(SCOPES))
    authorization = {"Authorization": f"Bearer {clear}"}
    if mode == "existing":
        names = {parameter.name for parameter in operation.path_parameters}
        strategy = operation.as_strategy(
            GenerationMode.POSITIVE, path_parameters={k: v for k, v in existing.items() if k in names}
        )
    else:
        strategy = operation.as_strategy(GenerationMode(mode))

    @given(case=strategy)
    @hypothesis_settings(
        max_examples=40,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    def run(case):
        # Negative generation invents headers; a malformed Host is the transport's 400 (Django's
        # ALLOWED_HOSTS check, before any view), not an answer of the operation the schema describes.
        if case.headers:
            case.headers = {name: value for name, value in case.headers.items() if name.lower() != "host"}
        case.call_and_validate(headers=authorization, checks=CHECKS)

    run()
