"""``LEITSTAND_LOG_FORMAT=json`` in real processes: a pool and the control process write nothing but
JSON lines, and a failed attempt's line names its job, attempt, type, pool and correlation ID.
(The web server's lines: tests/processes/test_web_server.py.)"""

import json

import pytest

from jobs.models import Job
from tests.support.pools import PoolProcesses, state_of, submit, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def json_lines(text: str) -> list[dict]:
    """Every line of a process's output, each parsed as one JSON object (fails on any other line)."""
    parsed = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"line {number} is not JSON: {line!r}") from None
        assert {"time", "level", "logger", "message", "process"} <= parsed[-1].keys(), line
    return parsed


def test_pools_and_the_control_process_write_json_lines_that_name_their_job(tmp_path):
    processes = PoolProcesses(str(tmp_path), LEITSTAND_LOG_FORMAT="json")
    try:
        processes.start("control")
        processes.start("crawl")
        done = submit({"steps": ["fetch", "store"]}, correlation_id="php-request-1")
        failing = submit({"fail": "permanent"}, correlation_id="php-request-2")
        unclear = submit({"fail": "unclear"})
        wait_for(
            lambda: (state_of(done), state_of(failing)) == ("result_stored", "dead")
            and state_of(unclear) in ("unclear", "ready_for_review"),
            timeout=60,
            message="one job stored, one dead, one for a person",
        )
    finally:
        processes.stop_all()

    crawl, control = json_lines(processes.log("crawl")), json_lines(processes.log("control"))
    assert any(line["message"].startswith("control: pid") for line in control)
    assert any(line["message"].startswith("pool crawl:") for line in crawl)
    assert all(line.get("pool") == "crawl" for line in crawl), "a pool's every line names it"
    (asking,) = [line for line in crawl if line["message"].startswith("attempt needs a person (unclear)")]
    assert asking["level"] == "INFO" and asking["job_id"] == str(unclear.pk), "a business outcome is no fault"
    (failed,) = [line for line in crawl if line["message"].startswith("attempt failed")]
    assert failed["level"] == "WARNING" and "PermanentError" in failed["message"]
    job = Job.objects.get(pk=failing.pk)
    assert (failed["job_id"], failed["attempt"], failed["job_type"], failed["correlation_id"]) == (
        str(job.pk),
        job.lease_version,
        "synthetic",
        "php-request-2",
    )
