"""PostgreSQL's write budget on this machine, for the capacity model in docs/operations.md.

Run: .venv/bin/python -m bench.capacity [--seconds 30] [--clients 4]
(uses a throwaway embedded PostgreSQL unless DATABASE_URL is set; ``pgbench`` ships with it).

Three loads, one after the other, each for ``--seconds`` with ``--clients`` connections:
1. ``pgbench -N`` (the TPC-B-like transaction without the teller and branch updates: one UPDATE,
   one SELECT, one INSERT per commit) — the baseline everyone quotes;
2. one INSERT of a 200-byte row per commit — what a commit costs;
3. a hundred INSERTs per commit — what a row costs when commits are batched, as the engine batches
   claims and completions.
It prints commits/s and rows/s; `bench/throughput.py` prints what one job costs in commits, rows and
WAL, and docs/operations.md divides the one by the other.
"""

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from devtools.embedded_db import client_program  # noqa: E402

SINGLE = "INSERT INTO bench_rows (payload) VALUES (repeat('x', 200));\n"
BATCH = "BEGIN;\n" + SINGLE * 100 + "COMMIT;\n"


def pgbench(*args: str) -> str:
    done = subprocess.run(
        [client_program("pgbench"), *args, os.environ["DATABASE_URL"]], capture_output=True, text=True, check=True
    )
    return done.stdout


def tps(output: str) -> float:
    return float(re.search(r"tps = ([\d.]+)", output).group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--clients", type=int, default=4)
    args = parser.parse_args()
    run = ["-n", "-c", str(args.clients), "-j", "2", "-T", str(args.seconds)]
    pgbench("-i", "-q", "-s", "20")
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_rows")
        cursor.execute("CREATE TABLE bench_rows (id bigserial PRIMARY KEY, at timestamptz DEFAULT now(), payload text)")
    results = {"pgbench -N (1 UPDATE + 1 INSERT per commit)": (tps(pgbench("-N", *run)), 2)}
    with tempfile.TemporaryDirectory() as scripts:
        for name, script, rows in (("1 INSERT per commit", SINGLE, 1), ("100 INSERTs per commit", BATCH, 100)):
            path = Path(scripts) / "load.sql"
            path.write_text(script)
            results[name] = (tps(pgbench("-f", str(path), *run)), rows)
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        synchronous = cursor.fetchone()[0]
    print(f"{os.cpu_count()} cores, {args.clients} clients, {args.seconds} s each, synchronous_commit={synchronous}")
    print(f"{'load':<48} {'commits/s':>10} {'rows/s':>10}")
    for name, (commits, rows) in results.items():
        print(f"{name:<48} {commits:>10,.0f} {commits * rows:>10,.0f}")


if __name__ == "__main__":
    main()
