"""``manage.py flow_snapshot [--write]``: the declared flow — every state transition and every job
type's expected paths — as the JSON that ``docs/flow-snapshot.json`` holds. A test compares the two,
so a change to the flow shows up in review as a diff of that file; ``--write`` updates it."""

import json
from pathlib import Path

from django.core.management.base import BaseCommand

from dashboard.diagram import declared_edges
from workers.runtime.registry import registry
from workers.runtime.tasks import TYPE_PREFIX as TASK_TYPE_PREFIX

SNAPSHOT = Path(__file__).resolve().parents[3] / "docs" / "flow-snapshot.json"


def flow_declared() -> dict:
    return {
        "transitions": [{"from": e.source, "to": e.target, "names": list(e.names)} for e in declared_edges()],
        "job_types": {
            t.name: {
                "patterns": list(t.expected_paths),
                "paths": sorted((" > ".join(steps) or "(no steps)") + " -> " + exit for steps, exit in t.paths.paths),
            }
            for t in registry.all()
            if not t.name.startswith(TASK_TYPE_PREFIX)  # the installed apps' @task functions, not Leitstand's flow
        },
    }


def flow_json() -> str:
    return json.dumps(flow_declared(), indent=2, sort_keys=True) + "\n"


class Command(BaseCommand):
    help = "Print the declared flow (transitions and expected paths) as JSON, or --write docs/flow-snapshot.json."

    def add_arguments(self, parser):
        parser.add_argument("--write", action="store_true", help=f"write {SNAPSHOT}")

    def handle(self, *args, write, **options):
        if write:
            SNAPSHOT.write_text(flow_json())
            self.stdout.write(f"wrote {SNAPSHOT}")
        else:
            self.stdout.write(flow_json(), ending="")
