"""``manage.py create_api_token --name NAME --scopes jobs:read,jobs:write [--expires-days N]``:
create a REST API token and print it once (only its hash is stored). ``--revoke NAME`` revokes one."""

from django.core.management.base import BaseCommand, CommandError

from api.tokens import SCOPES, token_create, token_revoke
from jobs.services import JobInputError


class Command(BaseCommand):
    help = f"Create (or --revoke) a REST API token. Scopes: {', '.join(SCOPES)}."

    def add_arguments(self, parser):
        parser.add_argument("--name")
        parser.add_argument("--scopes", default="", help="comma-separated")
        parser.add_argument("--expires-days", type=float, default=None)
        parser.add_argument("--revoke", metavar="NAME", help="revoke the live token of this name")

    def handle(self, *args, name, scopes, expires_days, revoke, **options):
        try:
            if revoke:
                token = token_revoke(name=revoke)
                self.stdout.write(f"revoked {token.name} ({token.prefix}…)")
                return
            if not name:
                raise CommandError("--name is required")
            token, clear = token_create(
                name=name, scopes=[s.strip() for s in scopes.split(",") if s.strip()], expires_days=expires_days
            )
        except JobInputError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(clear)
        self.stderr.write(f"token {token.name} with scopes {', '.join(token.scopes)} — shown once, store it now")
