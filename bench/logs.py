"""What a log line costs in each format Leitstand could write: the plain format against JSON ones.

Run: .venv/bin/python -m bench.logs [--lines 50000] [--rounds 5]

One ``logging`` handler writing to an in-memory stream, ``jobs.logs.ContextFilter`` on it and a
job's five fields bound (as a handler's lines carry them in a pool), a warning with one argument,
formatted by: the plain format (the baseline; ``LEITSTAND_LOG_FORMAT=plain``), python-json-logger
(``jobs.logs.JsonFormatter``: ``LEITSTAND_LOG_FORMAT=json``), structlog's ``ProcessorFormatter``
rendering the same standard-library records as JSON (how structlog takes over a project that logs
through ``logging``), and a formatter written by hand around ``json.dumps`` (the floor). Rounds are
interleaved; the median per line is reported, and its ratio to the plain format.
"""

import argparse
import io
import json
import logging
import statistics
import time

import structlog

from jobs import logs

PLAIN = "%(asctime)s %(levelname)s %(name)s %(process)d [%(correlation_id)s] %(message)s"


class HandWritten(logging.Formatter):
    """The floor: the fields picked by hand and one ``json.dumps``."""

    FIELDS = logs.FIELDS

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        for name in self.FIELDS:
            if name in record.__dict__:
                line[name] = record.__dict__[name]
        return json.dumps(line, default=str)


def structlog_formatter() -> logging.Formatter:
    return structlog.stdlib.ProcessorFormatter(
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.JSONRenderer(),
        ],
        foreign_pre_chain=[
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.stdlib.ExtraAdder(),
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
    )


FORMATTERS = {
    "plain (baseline)": lambda: logs.formatter("plain", PLAIN),
    "python-json-logger (jobs.logs)": lambda: logs.formatter("json", PLAIN),
    "structlog ProcessorFormatter": structlog_formatter,
    "json.dumps by hand": HandWritten,
}


def per_line(make, lines: int) -> float:
    """Microseconds per line written through a handler with ``make()``'s formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.ContextFilter())
    handler.setFormatter(make())
    log = logging.getLogger("bench.logs")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.INFO)
    with logs.bound(
        job_id="0193a3c4-7d2e-7c51-9a0b-3f1e2d4c5b6a",
        attempt=1,
        job_type="analysis",
        pool="analysis",
        correlation_id="php-request-4711",
    ):
        began = time.perf_counter()
        for n in range(lines):
            log.warning("candidate %s could not be decoded", n)
        took = time.perf_counter() - began
    assert stream.getvalue().count("\n") == lines
    return took / lines * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[float]] = {name: [] for name in FORMATTERS}
    for _ in range(args.rounds):
        for name, make in FORMATTERS.items():
            results[name].append(per_line(make, args.lines))
    baseline = statistics.median(results["plain (baseline)"])
    print(f"{args.lines} lines per round, {args.rounds} rounds interleaved (median)")
    print(f"{'formatter':<34}{'µs/line':>9}{'ratio':>8}")
    for name, runs in results.items():
        median = statistics.median(runs)
        print(f"{name:<34}{median:>9.2f}{median / baseline:>8.2f}")


if __name__ == "__main__":
    main()
