"""The OpenAPI document a generated client is made from: valid under openapi-spec-validator, every
operation named for a client (no module path), tagged, summarised, with its problem types and with
request and response examples that match its own schemas; and the committed snapshot
``docs/openapi.json`` is what is served, so a change of the contract shows up in review."""

import json
import re

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from api.examples import EXAMPLES
from api.management.commands.openapi_snapshot import SNAPSHOT, openapi_json


@pytest.fixture(scope="module")
def document():
    return json.loads(openapi_json())


def operations(document):
    return [(path, method, op) for path, ops in document["paths"].items() for method, op in ops.items()]


def test_the_served_document_is_valid_openapi(client, document):
    served = client.get("/api/v1/openapi.json")
    assert served.status_code == 200
    assert served.json() == document
    validate(document)  # raises with the first error


def test_every_operation_is_named_tagged_and_summarised_for_a_generated_client(document):
    ids = [op["operationId"] for _, _, op in operations(document)]
    assert len(ids) == len(set(ids)), "operation IDs are unique"
    assert {"jobs_create", "batches_get", "alert_test_confirm"} <= set(ids)
    for path, method, op in operations(document):
        where = f"{method.upper()} {path}"
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", op["operationId"]), where
        assert op.get("tags"), where
        summary = op.get("summary", "")
        # Not ninja's default (the function's name in title case), and short enough for a list.
        assert summary and summary != op["operationId"].replace("_", " ").title() and len(summary) <= 60, where
        assert op.get("description"), where


def test_every_error_answer_names_its_problem_types(document):
    for path, method, op in operations(document):
        for status, answer in op["responses"].items():
            if status.startswith(("4", "5")):
                assert "application/problem+json" in answer["content"], (method, path, status)
                assert "Problem types: `" in answer["description"], (method, path, status)


def test_every_example_matches_its_operations_schema(document):
    components = document["components"]

    def check(schema, example, where):
        validator = Draft202012Validator({**schema, "components": components})
        errors = sorted(validator.iter_errors(example), key=str)
        assert not errors, f"{where}: {errors[0].message} at {list(errors[0].absolute_path)}"

    seen = set()
    for path, method, op in operations(document):
        where = f"{method.upper()} {path}"
        if "requestBody" in op:
            content = op["requestBody"]["content"]["application/json"]
            assert "example" in content, f"{where}: a request example"
            check(content["schema"], content["example"], f"{where} request")
        successes = [answer for status, answer in op["responses"].items() if status.startswith("2")]
        assert successes and all("example" in a["content"]["application/json"] for a in successes), where
        for answer in successes:
            content = answer["content"]["application/json"]
            check(content["schema"], content["example"], f"{where} response")
        seen.add(op["operationId"])
    assert seen == set(EXAMPLES), "an example for every operation, and none for one that is gone"


def test_a_broken_example_is_caught(document):
    """The check above can fail: an example with a field of the wrong type does not pass it."""
    schema = document["paths"]["/api/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    wrong = {**EXAMPLES["jobs_create"]["request"], "priority": "urgent"}
    validator = Draft202012Validator({**schema, "components": document["components"]})
    assert list(validator.iter_errors(wrong))


def test_the_committed_snapshot_is_the_served_document():
    assert SNAPSHOT.read_text() == openapi_json(), (
        "the API's contract changed: review the difference and run manage.py openapi_snapshot --write"
    )
