"""``manage.py openapi_snapshot [--write]``: the REST API's OpenAPI document as ``/api/v1/openapi.json``
serves it, as the JSON that ``docs/openapi.json`` holds. A test compares the two, so a change of the
contract shows up in review as a diff of that file; ``--write`` updates it."""

import json
from pathlib import Path

from django.core.management.base import BaseCommand

from api.site import api

SNAPSHOT = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"


def openapi_json() -> str:
    # Through JSON first: the schema's status codes are numbers until they are served.
    return json.dumps(json.loads(json.dumps(api.get_openapi_schema())), indent=2, sort_keys=True) + "\n"


class Command(BaseCommand):
    help = "Print the REST API's OpenAPI document, or --write docs/openapi.json."

    def add_arguments(self, parser):
        parser.add_argument("--write", action="store_true", help=f"write {SNAPSHOT}")

    def handle(self, *args, write, **options):
        if write:
            SNAPSHOT.write_text(openapi_json())
            self.stdout.write(f"wrote {SNAPSHOT}")
        else:
            self.stdout.write(openapi_json(), ending="")
