"""The ``synthetic`` job type: canaries, benchmarks and fault drills, run by the real machinery.

Every payload field has a default, so ``{}`` is a valid no-op job:

| field | default | meaning |
| --- | --- | --- |
| ``pool`` | ``synthetic`` | which pool runs it: an operator's drill may name another (never ``notify``: alerts and webhooks); an API client's job runs in ``synthetic`` |
| ``duration_ms`` | 0 | total time spent in the steps (sleeps in slices, honouring ``should_stop``) |
| ``steps`` | ``["work"]`` | at most 50 step names, recorded as step events, time split evenly |
| ``fail`` | ``"none"`` | ``transient``, ``permanent``, ``unclear``, ``crash`` (``os._exit`` mid-job), ``crash_after_effect`` (dies after its effect was recorded, before reporting), ``hang`` (ignores stop requests until its timeout) |
| ``fail_attempts`` | all | fail only while the attempt number is at most this |
| ``retry_after_s`` | — | with ``transient``: the Retry-After to report (0-86400 s) |
| ``effect`` | ``false`` | apply a ledger effect keyed by the job ID (at most once across attempts) |
| ``settle`` | ``false`` | end in ``done`` (the handler's own business rule decided) instead of ``result_stored`` |
"""

from __future__ import annotations

import os
import time

from jobs.errors import PermanentError, TransientError, UnclearError
from workers.runtime.context import Done, JobContext, Stored

FAILURE_MODES = {"none", "transient", "permanent", "unclear", "crash", "crash_after_effect", "hang"}
FIELDS = {"pool", "duration_ms", "steps", "fail", "fail_attempts", "retry_after_s", "effect", "settle"}
# Step events are rows: a canary needs a few, and no submitter may write thousands with one job.
MAX_STEPS = 50
# Pools a synthetic job may not choose: the notify pool's one worker delivers alerts and webhooks, and
# a 15 s synthetic job there delayed an operator's route test by 13 s.
CLOSED_POOLS = frozenset({"notify"})


class SyntheticTransientError(TransientError):
    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def parse(payload: dict) -> dict:
    """Validate a synthetic payload; a bad one is a permanent error with the field named."""
    unknown = set(payload) - FIELDS
    if unknown:
        raise PermanentError(f"unknown synthetic payload fields: {', '.join(sorted(unknown))}")
    spec = {
        "duration_ms": 0,
        "steps": ["work"],
        "fail": "none",
        "fail_attempts": None,
        "retry_after_s": None,
        "effect": False,
        "settle": False,
        **payload,
    }
    if not isinstance(spec["duration_ms"], (int, float)) or not 0 <= spec["duration_ms"] <= 3_600_000:
        raise PermanentError("payload.duration_ms must be a number from 0 to 3600000")
    if (
        not isinstance(spec["steps"], list)
        or len(spec["steps"]) > MAX_STEPS
        or not all(isinstance(s, str) and 0 < len(s) <= 100 and s.isprintable() for s in spec["steps"])
    ):
        raise PermanentError(f"payload.steps must be a list of at most {MAX_STEPS} step names (1-100 characters)")
    retry_after = spec["retry_after_s"]
    if retry_after is not None and (
        isinstance(retry_after, bool) or not isinstance(retry_after, (int, float)) or not 0 <= retry_after <= 86_400
    ):
        raise PermanentError("payload.retry_after_s must be a number of seconds from 0 to 86400")
    if "pool" in payload and (not isinstance(payload["pool"], str) or payload["pool"] in CLOSED_POOLS):
        raise PermanentError(
            f"payload.pool must name a pool other than {', '.join(sorted(CLOSED_POOLS))} (kept for the system's own work)"
        )
    if not isinstance(spec["fail"], str) or spec["fail"] not in FAILURE_MODES:
        raise PermanentError(f"payload.fail must be one of: {', '.join(sorted(FAILURE_MODES))}")
    if spec["fail_attempts"] is not None and (not isinstance(spec["fail_attempts"], int) or spec["fail_attempts"] < 0):
        raise PermanentError("payload.fail_attempts must be a non-negative integer")
    if not isinstance(spec["effect"], bool):
        raise PermanentError("payload.effect must be true or false")
    if not isinstance(spec["settle"], bool):
        raise PermanentError("payload.settle must be true or false")
    return spec


def handle(context: JobContext):
    spec = parse(context.payload)
    failing = spec["fail"] != "none" and (spec["fail_attempts"] is None or context.attempt <= spec["fail_attempts"])
    steps = spec["steps"] or ["work"]
    for name in steps:
        with context.step(name):
            _sleep(
                context, spec["duration_ms"] / 1000 / len(steps), honour_stop=not (failing and spec["fail"] == "hang")
            )
    if failing and spec["fail"] != "crash_after_effect":
        _fail(context, spec)
    result_ref = f"synthetic:{context.job_id}"
    if spec["effect"] or spec["fail"] == "crash_after_effect":
        # Applied once across attempts: a re-run gets the first attempt's recorded answer.
        applied = context.effect(result_ref, lambda: {"applied_by_attempt": context.lease_version}, kind="synthetic")
        result_ref += f":effect-by-attempt-{applied['applied_by_attempt']}"
    if failing and spec["fail"] == "crash_after_effect":
        os._exit(70)  # the effect is recorded, the status report is lost
    if spec["settle"]:
        return Done(reason="synthetic: settled", result_ref=result_ref)
    return Stored(result_ref=result_ref)


def _sleep(context: JobContext, seconds: float, *, honour_stop: bool) -> None:
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        if honour_stop:
            context.check_stop()
        time.sleep(min(left, 0.05))


def _fail(context: JobContext, spec: dict):
    mode = spec["fail"]
    if mode == "crash":
        os._exit(70)  # the worker process dies mid-job, as with an OOM kill
    if mode == "hang":
        while True:  # ignores stop requests; only the job's timeout ends it
            time.sleep(0.05)
    if mode == "transient":
        raise SyntheticTransientError(
            f"synthetic transient failure on attempt {context.attempt}", retry_after=spec["retry_after_s"]
        )
    if mode == "permanent":
        raise PermanentError(f"synthetic permanent failure on attempt {context.attempt}")
    raise UnclearError("synthetic case left for a reviewer")
