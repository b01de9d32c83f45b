"""The engine's SQL layer (jobs/queries.sql): every statement is named, documented, used, fenced
where its name says so, and names no job state or attempt outcome of its own."""

import re
from pathlib import Path

from jobs.models import Attempt, State
from jobs.sql import SOURCE, Queries, queries

ENGINE = Path(__file__).resolve().parents[2] / "jobs"


def test_every_statement_is_documented_and_used_by_the_engine():
    code = "\n".join(path.read_text() for path in ENGINE.glob("*.py"))
    for name in queries.names():
        assert queries.doc(name), f"{name} has no documentation"
        assert f"queries.{name}" in code or f'"{name}"' in code, f"{name} is used nowhere in jobs/"


def test_no_statement_names_a_state_or_an_outcome():
    forbidden = set(State.values) | set(Attempt.Outcome.values)
    for name in queries.names():
        named = set(re.findall(r"'([a-z_]+)'", getattr(queries, name))) & forbidden
        assert not named, f"{name} names {sorted(named)}: pass them as parameters from State or Attempt.Outcome"


def test_a_statement_fenced_by_the_lease_says_so_in_its_name():
    for name in queries.names():
        sql = getattr(queries, name)
        # A single write compares the writer's lease version; the batch completion joins each one's.
        fenced = bool(re.search(r"\bid = %\(job_id\)s AND lease_version = %\(lease_version\)s", sql))
        fenced = fenced or "j.lease_version = i.lease_version" in sql
        assert fenced == name.endswith("_if_lease_held"), name


def test_the_file_is_read_whole_and_a_duplicate_name_is_refused():
    text = SOURCE.read_text()
    assert len(queries.names()) == len(re.findall(r"^-- name: ", text, re.M))
    try:
        Queries(text + "\n-- name: job_lock_if_lease_held\nSELECT 1\n")
    except ValueError as refused:
        assert "defined twice" in str(refused)
    else:
        raise AssertionError("a duplicate statement name was accepted")


def test_a_shared_part_is_written_once_and_put_in_place():
    text = SOURCE.read_text()
    assert text.count("INSERT INTO jobs_stalewrite") == 2, "the fenced statements' refusal, and stale_write_record"
    including = [name for name in queries.names() if "INSERT INTO jobs_stalewrite" in getattr(queries, name)]
    assert len(including) == 7 and "stale_write_record" in including
    assert not any("-- include:" in getattr(queries, name) for name in queries.names())
    try:
        Queries("-- name: x_if_lease_held\n-- doc\nWITH a AS (SELECT 1),\n-- include: nowhere\nSELECT 1\n")
    except ValueError as refused:
        assert "no fragment 'nowhere'" in str(refused)
    else:
        raise AssertionError("an include of a fragment that does not exist was accepted")


def test_nothing_outside_the_engine_names_an_engine_table():
    """Every statement on the engine's tables is in jobs/ (queries.sql, reads.sql, functions.sql):
    a change to a table means reading one package. Migrations, tests, benchmarks and the development
    tools (devtools/: the cluster drill counts its jobs directly) are outside."""
    from django.apps import apps

    root = ENGINE.parent
    tables = sorted({model._meta.db_table for model in apps.get_app_config("jobs").get_models()}, key=len)
    named = re.compile(r"\b(" + "|".join(tables[::-1]) + r")(?:_p\d{8}|_default|_legacy)?\b")
    offenders = []
    for path in sorted(root.glob("*/**/*.py")):
        relative = path.relative_to(root).as_posix()
        if (
            relative.split("/")[0] in ("jobs", "devtools", "tests", "bench", ".venv", "var")
            or "/migrations/" in relative
        ):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if named.search(line):
                offenders.append(f"{relative}:{number}: {line.strip()[:100]}")
    assert not offenders, "engine tables named outside jobs/:\n" + "\n".join(offenders)


def test_reads_name_no_state_by_hand_and_render_the_declared_ones():
    from jobs.reads import reads

    forbidden = set(State.values) | set(Attempt.Outcome.values)
    for name in reads.names():
        assert reads.doc(name), f"{name} has no documentation"
        written = set(re.findall(r"'([a-z_]+)'", reads.written(name))) & forbidden
        assert not written, f"reads.sql {name} writes {sorted(written)} by hand: use {{state.NAME}}"
    assert "NOT (state IN ('done', 'dead', 'cancelled'))" in reads.open_counts, "as job_open_idx was built"
    code = "\n".join(path.read_text() for path in ENGINE.parent.glob("*/**/*.py") if ".venv" not in path.parts)
    for name in reads.names():
        assert f'"{name}"' in code, f"reads.sql {name} is used nowhere"
