"""Request and response examples of every operation in the OpenAPI schema (``api.site``), by operation
ID: what a generated client's documentation and the interactive docs show. Each is checked against
its operation's schema by ``tests/api/test_openapi.py``, so an example cannot drift from the
contract."""

from __future__ import annotations

JOB_ID = "01935d4e-7b1c-7c3a-9f0e-5a4b3c2d1e0f"
AT = "2026-12-05T10:42:07.118000+00:00"

JOB = {
    "id": JOB_ID,
    "type": "crawl",
    "state": "planned",
    "pool": "crawl",
    "idempotency_key": "order-4711",
    "correlation_id": "php-case-1",
    "parent_id": None,
    "schema_version": 1,
    "processing_version": "",
    "priority": 5,
    "source": "shop-a",
    "subject": "https://shop-a.example/catalogue",
    "payload": {"url": "https://shop-a.example/catalogue"},
    "created_at": AT,
    "due_at": AT,
    "state_changed_at": AT,
    "finished_at": None,
    "lease_owner": "",
    "attempt": 0,
    "heartbeat_at": None,
    "attempts": 0,
    "max_attempts": 5,
    "next_attempt_at": None,
    "result_ref": "",
    "result_checksum": "",
    "error_class": "",
    "error_message": "",
    "completion_reason": "",
    "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "transitions": [
        {
            "from_state": "",
            "to_state": "planned",
            "at": AT,
            "lease_version": 0,
            "cause": "submitted",
            "actor": "api:php-core",
        }
    ],
    "findings": [],
    "recheck_plan": None,
    "logs": None,
}


def _job(state: str, cause: str, **fields) -> dict:
    transition = {"from_state": JOB["state"], "to_state": state, "at": AT, "lease_version": 0, "cause": cause}
    return {**JOB, **fields, "state": state, "transitions": [*JOB["transitions"], {**transition, "actor": "api:php"}]}


BATCH = {
    "id": 1042,
    "key": "import-2026-12-05",
    "name": "December catalogue import",
    "correlation_id": "import-2026-12-05",
    "created_by": "api:php-core",
    "created_at": AT,
    "target_finish_at": "2026-12-05T18:00:00+00:00",
    "finished_at": None,
    "state": "open",
    "counters": {"total": 2, "done": 1, "failed": 0, "dead": 0, "in_review": 0, "rechecking": 0, "cancelled": 0},
    "ended": 1,
    "rate_per_minute": 12.5,
    "eta": "2026-12-05T10:43:00+00:00",
    "misses_target": False,
    "stats": {},
    "job_ids": [JOB_ID, "01935d4e-7b1c-7c3a-9f0e-5a4b3c2d1e10"],
}

SCHEDULE = {
    "source_id": 7,
    "name": "shop-a",
    "is_active": True,
    "crawl_every_minutes": 1440,
    "is_default_interval": False,
    "window_start": "02:00:00",
    "window_end": "05:00:00",
    "time_zone": "Europe/Berlin",
    "last_run": {"batch_id": 1040, "name": "crawl shop-a", "started_at": AT, "finished_at": None},
    "last_crawled_at": AT,
    "next_run_at": "2026-12-06T01:00:00+00:00",
    "due": False,
    "waiting": "",
}

PLAN = {
    "id": 318,
    "job_id": JOB_ID,
    "correlation_id": "php-case-1",
    "url": "https://shop-a.example/item/9",
    "target": "removed",
    "state": "active",
    "sequence": 1,
    "next_check_at": "2026-12-06T10:42:07+00:00",
    "next_check_reason": "the image was still there",
    "deadline_at": "2026-12-19T10:42:07+00:00",
    "end_reason": "",
    "end_note": "",
    "ended_by": "",
    "ended_at": None,
    "observations": [
        {
            "sequence": 1,
            "observed_at": AT,
            "http_status": 200,
            "kind": "image_present",
            "match_score": 0.97,
            "content_hash": "9f2c…",
            "decision": "check again",
            "next_check_at": "2026-12-06T10:42:07+00:00",
        }
    ],
}

FLOW_KEY = {
    "pool": "analysis",
    "key": "Bildarchiv Süd",
    "stored": "Bildarchiv S%C3%BCd",
    "waiting": 312,
    "oldest_due": AT,
    "running": 5,
    "max_running": 5,
    "limit": 5,
    "weight": 2,
    "paused": False,
    "rate_starts": 30,
    "rate_seconds": 60,
    "rate_limited_until": None,
    "reason": "their crawl-delay",
}

# operation ID -> {"request": body, "response": body of the success answer}
EXAMPLES: dict[str, dict] = {
    "jobs_create": {
        "request": {
            "type": "crawl",
            "payload": {"url": "https://shop-a.example/catalogue"},
            "idempotency_key": "order-4711",
            "priority": 5,
            "correlation_id": "php-case-1",
            "source": "shop-a",
        },
        "response": JOB,
    },
    "jobs_list": {"response": {"items": [{**JOB, "transitions": []}], "next_cursor": None}},
    "jobs_get": {"response": JOB},
    "jobs_move": {
        "request": {"priority": 0, "reason": "the customer is on the phone"},
        "response": {**JOB, "priority": 0},
    },
    "jobs_hold": {
        "request": {"reason": "the customer asked us to wait"},
        "response": _job("held", "held: the customer asked us to wait"),
    },
    "jobs_resume": {"request": {"reason": "the customer is ready"}, "response": JOB},
    "jobs_cancel": {
        "request": {"reason": "order withdrawn"},
        "response": _job(
            "cancelled", "cancelled: order withdrawn", finished_at=AT, completion_reason="order withdrawn"
        ),
    },
    "batches_create": {
        "request": {
            "key": "import-2026-12-05",
            "name": "December catalogue import",
            "target_finish_at": "2026-12-05T18:00:00+00:00",
            "jobs": [
                {"type": "crawl", "payload": {"url": "https://shop-a.example/"}, "idempotency_key": "imp-1"},
                {"type": "crawl", "payload": {"url": "https://shop-b.example/"}, "idempotency_key": "imp-2"},
            ],
        },
        "response": BATCH,
    },
    "batches_get": {"response": BATCH},
    "rechecks_get": {"response": PLAN},
    "rechecks_decide": {
        "request": {"reason": "the shop confirmed the removal by mail"},
        "response": {**PLAN, "state": "ended", "end_reason": "decided", "ended_by": "api:php-core", "ended_at": AT},
    },
    "sources_list": {"response": [SCHEDULE]},
    "schedule_get": {"response": SCHEDULE},
    "schedule_set": {
        "request": {
            "crawl_every_minutes": 1440,
            "window_start": "02:00:00",
            "window_end": "05:00:00",
            "time_zone": "Europe/Berlin",
        },
        "response": SCHEDULE,
    },
    "flow_keys_list": {"response": {"items": [FLOW_KEY], "next_after": None}},
    "flow_key_set": {
        "request": {
            "key": "Bildarchiv Süd",
            "max_running": 5,
            "rate_starts": 30,
            "rate_seconds": 60,
            "reason": "their crawl-delay",
        },
        "response": FLOW_KEY,
    },
    "alert_test_confirm": {
        "request": {"token": "rt_3f9a…"},
        "response": {
            "route": "operations",
            "test_id": 12,
            "sent_at": AT,
            "confirmed_at": "2026-12-05T10:42:31+00:00",
            "confirmed_by": "api:pager-bridge",
        },
    },
}

# The problem types (RFC 9457 ``type``) each error status may carry; ``about:blank`` for the rest.
PROBLEM_TYPES = {
    "400": ["/problems/invalid-request", "about:blank"],
    "401": ["/problems/unauthorized"],
    "403": ["about:blank"],
    "404": ["about:blank"],
    "409": ["about:blank"],
    "413": ["/problems/payload-too-large"],
    "422": ["/problems/invalid-request", "/problems/invalid-job", "/problems/idempotency-conflict", "about:blank"],
    "429": ["/problems/rate-limited", "/problems/too-many-open-jobs"],
    "503": ["/problems/bulk-lane-full"],
}
