"""Where a benchmark's database time goes, statement by statement: PostgreSQL's own statement log.

``on(server)`` makes the embedded server log every statement with its duration
(``log_min_duration_statement = 0``, as the superuser; a reload, no restart), ``off(server)`` stops
it; ``summary(log, offset, per=…)`` reads what was logged after ``offset`` and answers each
statement's count and time per unit of work (a page, a job), grouped by its text with the literals
and parameters left out. The extended protocol's phases (parse, bind, execute) are one statement;
``BEGIN``/``COMMIT`` count as the statements they are. Logging costs the server time of its own: a
run with it says where the time goes, not how fast the run is.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

SUPERUSER = "postgres"
_LINE = re.compile(r"LOG:\s+duration: ([0-9.]+) ms\s+(parse|bind|execute|statement)[^:]*: (.*)")
_LITERALS = re.compile(r"'(?:[^']|'')*'|\$\d+|%\(\w+\)s|\b\d+(?:\.\d+)?\b")
_COMMENT = re.compile(r"--[^\n]*")
_PREFIX = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")  # a log line's start (log_line_prefix %m)


def on(server) -> Path:
    """Log every statement of ``server`` (an ``embedded_db.ServerStatus``); returns its log file."""
    _set(server, "0")
    return server.pgdata / "log"


def off(server) -> None:
    _set(server, "-1")


def _set(server, value: str) -> None:
    with psycopg.connect(server.database_url("postgres", user=SUPERUSER), autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET log_min_duration_statement = {value}")
        conn.execute("SELECT pg_reload_conf()")


@dataclass
class Statement:
    text: str
    count: int = 0
    ms: float = 0.0
    each: list[float] = field(default_factory=list)  # each execution's time (its phases together)
    is_open: bool = False  # its last execution's execute phase is still to come


def summary(log: Path, offset: int, *, per: int, shown: int = 25) -> str:
    """The statements logged after byte ``offset`` of ``log``, per one of ``per`` units of work."""
    statements: dict[str, Statement] = {}
    current: list[str] = []
    total_ms = 0.0
    count = 0

    def close() -> None:
        nonlocal total_ms, count
        if not current:
            return
        phase, ms = current[0], float(current[1])
        text = " ".join(_COMMENT.sub(" ", line) for line in current[2:])  # a comment ends with its line
        key = _LITERALS.sub("?", " ".join(text.split()))[:150]
        entry = statements.setdefault(key, Statement(key))
        entry.ms += ms
        total_ms += ms
        if not entry.is_open:  # a new execution: its parse, its bind or the statement itself comes first
            entry.each.append(0.0)
        entry.each[-1] += ms
        entry.is_open = phase in ("parse", "bind")
        if phase in ("execute", "statement"):
            entry.count += 1
            count += 1
        current.clear()

    with log.open(errors="replace") as lines:
        lines.seek(offset)
        for line in lines:
            match = _LINE.search(line)
            if match:
                close()
                current.extend([match.group(2), match.group(1), match.group(3)])
            elif _PREFIX.match(line):  # another line of the log (a DETAIL, an error): the statement ended
                close()
            elif current:  # a statement's next line
                current.append(line.strip())
    close()
    per = max(per, 1)
    rows = sorted(statements.values(), key=lambda s: s.ms, reverse=True)[:shown]
    out = [
        f"statements per unit: {count / per:.1f}, their time {total_ms / per:.2f} ms (server time, logging on)",
        f"{'count/unit':>10} {'ms/unit':>8} {'p50 ms':>7} {'p99 ms':>7}  statement (literals as ?)",
    ]
    out += [
        f"{s.count / per:10.2f} {s.ms / per:8.3f} {_quantile(s.each, 0.5):7.3f} {_quantile(s.each, 0.99):7.2f}  {s.text}"
        for s in rows
    ]
    return "\n".join(out)


def _quantile(values: list[float], q: float) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[max(int(q * 100) - 1, 0)]
