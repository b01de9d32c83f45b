"""The REST API v1 for the PHP core (django-ninja, OpenAPI at /api/v1/openapi.json, docs at
/api/v1/docs): the resources' routers on one API, with token authentication and problem answers."""

from __future__ import annotations

from ninja import NinjaAPI

from api import alert_tests, batches, flows, jobs, rechecks, sources
from api.auth import TokenAuth
from api.errors import PROBLEM, PROBLEM_SCHEMA, PROBLEM_STATUSES, handlers_install
from api.examples import EXAMPLES, PROBLEM_TYPES


class LeitstandApi(NinjaAPI):
    """Declares the problem answers of every operation in the OpenAPI schema, as they are sent:
    ``application/problem+json`` (ninja would describe them as plain JSON), each operation's
    examples, and operation IDs a generated client reads well."""

    def get_openapi_operation_id(self, operation) -> str:
        """The view's own name (``jobs_create``, ``batches_get``, ``alert_test_confirm``): what a
        generated client names its functions, with no module path in it."""
        return operation.view_func.__name__

    def get_openapi_schema(self, **kwargs):
        schema = super().get_openapi_schema(**kwargs)
        schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = PROBLEM_SCHEMA
        schema["components"]["parameters"] = REQUEST_HEADERS
        schema["components"]["headers"] = ANSWER_HEADERS
        problem_content = {PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}}
        for path, operations in schema["paths"].items():
            for method, operation in operations.items():
                statuses = {"401", "403", "422", "429"}
                if method in ("post", "put"):
                    statuses |= {"400", "413"}
                if "{" in path:
                    statuses.add("404")
                if path.endswith(("/cancel", "/move", "/hold", "/resume", "/decision", "/alert-tests/confirm")):
                    statuses.add("409")
                if method == "get" and path.endswith("/jobs"):
                    statuses.add("400")
                if method == "post" and path.endswith(("/jobs", "/batches", "/resume")):
                    statuses.add("503")  # a full bulk lane (api/backpressure.py)
                for status in sorted(statuses):
                    kinds = ", ".join(f"`{kind}`" for kind in PROBLEM_TYPES[status])
                    answer = {
                        "description": f"{PROBLEM_STATUSES[status]} Problem types: {kinds}.",
                        "content": problem_content,
                    }
                    if status in ("429", "503"):
                        answer["headers"] = {
                            "Retry-After": {
                                "schema": {"type": "integer"},
                                "description": "Seconds until the next minute's window."
                                if status == "429"
                                else "Seconds to wait before submitting to the bulk lane again.",
                            }
                        }
                    operation.setdefault("responses", {})[status] = answer
                operation.setdefault("parameters", []).extend(
                    {"$ref": f"#/components/parameters/{name}"} for name in REQUEST_HEADERS
                )
                for answer in operation["responses"].values():
                    answer.setdefault("headers", {}).update(
                        {name: {"$ref": f"#/components/headers/{name}"} for name in ANSWER_HEADERS}
                    )
                _examples_add(operation)
        return schema


_PRINTABLE = "^[\\x20-\\x7E]*$"
# The headers every operation reads (api/middleware.py) and answers, declared once.
REQUEST_HEADERS = {
    "X-Correlation-ID": {
        "name": "X-Correlation-ID",
        "in": "header",
        "required": False,
        "description": "Ties this request, the jobs it creates and their webhooks together; a new one when "
        "absent. At most 255 printable ASCII characters, else 422.",
        "schema": {"type": "string", "maxLength": 255, "pattern": _PRINTABLE},
    },
    "traceparent": {
        "name": "traceparent",
        "in": "header",
        "required": False,
        "description": "W3C Trace Context. A token with jobs:all (or of a client an operator trusts) joins "
        "the trace; any other starts a new trace linked to it. Invalid or over 256 characters: ignored.",
        "schema": {"type": "string", "maxLength": 256},
    },
    "tracestate": {
        "name": "tracestate",
        "in": "header",
        "required": False,
        "description": "W3C Trace Context, with a trusted traceparent; over 512 characters: dropped whole.",
        "schema": {"type": "string"},
    },
}
ANSWER_HEADERS = {
    name: {"description": description, "schema": {"type": kind}}
    for name, kind, description in (
        ("X-Correlation-ID", "string", "The request's correlation ID: the one sent, or the new one."),
        (
            "traceresponse",
            "string",
            "W3C Trace Context Level 2: the trace this request was served in (absent outside one).",
        ),
        ("RateLimit-Limit", "integer", "Requests this token may make a minute (absent without a valid token)."),
        ("RateLimit-Remaining", "integer", "Requests left in this minute's window."),
        ("RateLimit-Reset", "integer", "Seconds until the window resets."),
    )
}


def _examples_add(operation: dict) -> None:
    """The operation's request and success examples (``api.examples``), where its schema shows them."""
    example = EXAMPLES.get(operation["operationId"], {})
    if "request" in example:
        operation["requestBody"]["content"]["application/json"]["example"] = example["request"]
    if "response" in example:
        for status, answer in operation["responses"].items():
            if str(status).startswith("2") and "application/json" in answer.get("content", {}):
                answer["content"]["application/json"]["example"] = example["response"]


api = LeitstandApi(
    title="Leitstand API",
    version="1",
    urls_namespace="api-v1",
    auth=TokenAuth(),
    docs_url="/docs",
    openapi_url="/openapi.json",
)
handlers_install(api)
api.add_router("", jobs.router)
api.add_router("", rechecks.router)
api.add_router("", batches.router)
api.add_router("", sources.router)
api.add_router("", flows.router)
api.add_router("", alert_tests.router)
