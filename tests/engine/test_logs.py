"""Log lines that say what they were written for (jobs/logs.py): the fields bound by the runtime, the
API and the console on every record, in the plain format for a person or one JSON object per line."""

import json
import logging
import subprocess
import sys
import threading
from datetime import UTC, datetime

import pytest
from django.db import OperationalError
from django.test import RequestFactory

from api.tokens import token_create
from config.log_context import UserLogMiddleware
from jobs import logs
from tests.support.db import PROJECT_ROOT, child_env


@pytest.fixture
def lines(log_records):
    """What the root logger writes from now on, formatted as JSON lines and parsed back."""
    json_lines = logs.formatter("json", "")

    def parsed() -> list[dict]:
        written = [json_lines.format(record) for record in log_records]
        assert all("\n" not in line for line in written), "one line per record"
        return [json.loads(line) for line in written]

    return parsed


def test_a_json_line_names_time_level_logger_message_and_what_is_bound(lines):
    with logs.bound(job_id="j-1", attempt=2, job_type="crawl", correlation_id="c-9", client=""):
        logging.getLogger("leitstand.test").warning('a "quoted"\nsecond line %s', "ü")
    (line,) = lines()
    assert line["level"] == "WARNING" and line["logger"] == "leitstand.test"
    assert line["message"] == 'a "quoted"\nsecond line ü'
    assert (line["job_id"], line["attempt"], line["job_type"], line["correlation_id"]) == ("j-1", 2, "crawl", "c-9")
    assert "client" not in line, "an empty value binds nothing"
    assert abs(datetime.fromisoformat(line["time"]) - datetime.now(UTC)).total_seconds() < 60
    assert isinstance(line["process"], int)


def test_bound_fields_nest_and_end_with_their_block_and_a_record_s_own_extra_wins(lines):
    log = logging.getLogger("leitstand.test")
    with logs.bound(correlation_id="outer", pool="crawl"):
        with logs.bound(correlation_id="inner", job_id="j-2"):
            log.info("inside")
            log.info("own", extra={"job_id": "mine"})
        log.info("after")
    log.info("outside")
    inside, own, after, outside = lines()
    assert (inside["correlation_id"], inside["job_id"], inside["pool"]) == ("inner", "j-2", "crawl")
    assert own["job_id"] == "mine"
    assert after["correlation_id"] == "outer" and "job_id" not in after
    assert "correlation_id" not in outside and "pool" not in outside


def test_a_traceback_is_one_field_of_one_line(lines):
    try:
        raise ValueError("broken")
    except ValueError:
        logging.getLogger("leitstand.test").exception("it failed")
    (line,) = lines()
    assert line["message"] == "it failed" and "ValueError: broken" in line["exception"]


def test_a_lazy_field_is_read_only_when_a_line_is_written_and_never_costs_the_line(lines):
    reads = []

    def user():
        reads.append(1)
        return "ops"

    with logs.bound(user=user):
        assert reads == []
        logging.getLogger("leitstand.test").info("one")
    with logs.bound(user=lambda: 1 / 0):
        logging.getLogger("leitstand.test").info("two")
    one, two = lines()
    assert reads == [1] and one["user"] == "ops"
    assert two["message"] == "two" and "user" not in two


def test_a_process_s_fields_reach_the_lines_of_threads_started_later(lines):
    logs.bind_process(pool="crawl")
    try:
        thread = threading.Thread(target=lambda: logging.getLogger("leitstand.test").info("from a thread"))
        thread.start()
        thread.join()
    finally:
        logs._process.clear()
    (line,) = lines()
    assert line["pool"] == "crawl"


def test_the_plain_format_keeps_its_dash_where_no_correlation_is_bound():
    from django.conf import settings

    record = logging.LogRecord("leitstand.test", logging.INFO, __file__, 1, "hello", None, None)
    logs.ContextFilter().filter(record)
    assert "[-] hello" in logs.formatter("plain", settings.LOG_PLAIN_FORMAT).format(record)


@pytest.mark.django_db
def test_an_api_request_s_lines_name_its_client_and_token(client, lines):
    _, secret = token_create(name="php-core", scopes=["jobs:write", "jobs:synthetic"], client="shop")
    response = client.post(
        "/api/v1/jobs",
        {"type": "synthetic", "payload": {}, "idempotency_key": "k-1"},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_X_CORRELATION_ID="php-7",
    )
    assert response.status_code == 201
    (created,) = [line for line in lines() if "created by token" in line["message"]]
    assert (created["client"], created["token"], created["correlation_id"]) == ("shop", "php-core", "php-7")


@pytest.mark.django_db
def test_a_console_request_s_lines_name_its_user(lines, django_user_model):
    request = RequestFactory().get("/admin/")
    request.user = django_user_model.objects.create_user("reviewer-1")
    UserLogMiddleware(lambda r: logging.getLogger("leitstand.test").info("seen") or "answered")(request)
    (line,) = lines()
    assert line["user"] == "reviewer-1"


def test_an_unknown_log_format_is_refused_by_name():
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=PROJECT_ROOT,
        env=child_env(LEITSTAND_LOG_FORMAT="xml"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0 and "LEITSTAND_LOG_FORMAT is 'plain' or 'json', got 'xml'" in result.stderr


def test_with_json_logs_warnings_and_uncaught_exceptions_are_json_lines_too():
    script = (
        "import threading, warnings; warnings.warn('an old API'); "
        "t = threading.Thread(target=lambda: 1 / 0, name='sweeper'); t.start(); t.join(); "
        "raise LookupError('the end')"
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", script],
        cwd=PROJECT_ROOT,
        env=child_env(LEITSTAND_LOG_FORMAT="json"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [json.loads(line) for line in result.stderr.splitlines()]  # every line one JSON object
    assert result.returncode == 1
    warned, thread, main = lines
    assert warned["logger"] == "py.warnings" and "an old API" in warned["message"]
    assert thread["message"] == "uncaught exception in thread sweeper" and "ZeroDivisionError" in thread["exception"]
    assert main["level"] == "CRITICAL" and "LookupError: the end" in main["exception"]


def test_an_outage_is_logged_when_it_begins_backed_off_and_when_it_ends(caplog):
    """Issue 54, item 16: a loop failing ten times a second while the database is away."""
    now = [0.0]
    outage = logs.Outage(logging.getLogger("test.outage"), "heartbeat round", clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="test.outage")
    waits = []
    for _ in range(6000):  # ten minutes of rounds, each 0.1 s apart
        waits.append(outage.failed(OperationalError("connection refused\nis the server running?")))
        now[0] += 0.1
    outage.succeeded()
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0].startswith("heartbeat round failed: OperationalError: connection refused (an outage")
    assert caplog.records[0].exc_info is not None and all(r.exc_info is None for r in caplog.records[1:])
    assert 3 <= len(messages) <= 8, messages  # the first, a few backed-off counts, the end
    assert messages[-1] == "heartbeat round works again after 6000 failed rounds in 600 s"
    assert waits[0] == 0.2 and max(waits) == 5.0  # the loop backs off too
    outage.failed(OperationalError("again"))  # a new outage is logged as one again
    assert caplog.records[-1].getMessage().startswith("heartbeat round failed: OperationalError: again")
