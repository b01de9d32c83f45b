"""``manage.py create_api_token --name NAME --client CLIENT --scopes jobs:read,jobs:write [--expires-days N]``:
create a REST API token of a client (created if new; without ``--client``, a client of the token's own
name) and print it once (only its hash is stored). ``--rotate NAME`` prints a new secret for a token,
``--revoke NAME`` revokes one, ``--client-webhook URL`` (with ``--client``) gives the client its own
webhook and prints its signing secret once."""

from django.core.management.base import BaseCommand, CommandError

from api.clients import client_webhook_set
from api.tokens import SCOPES, token_create, token_revoke, token_rotate
from jobs.clients import client_ensure
from jobs.services import JobInputError

ACTOR = "command:create_api_token"


class Command(BaseCommand):
    help = f"Create (or --rotate, --revoke) a REST API token of a client. Scopes: {', '.join(SCOPES)}."

    def add_arguments(self, parser):
        parser.add_argument("--name")
        parser.add_argument("--client", default="", help="the client it acts for (default: the token's name)")
        parser.add_argument("--scopes", default="", help="comma-separated")
        parser.add_argument("--expires-days", type=float, default=None)
        parser.add_argument("--rotate", metavar="NAME", help="print a new secret for the live token of this name")
        parser.add_argument("--revoke", metavar="NAME", help="revoke the live token of this name")
        parser.add_argument(
            "--client-webhook", metavar="URL", help="the client's own webhook ('' for the global one, 'none' for none)"
        )

    def handle(self, *args, name, client, scopes, expires_days, rotate, revoke, client_webhook, **options):
        try:
            if revoke:
                token = token_revoke(name=revoke)
                self.stdout.write(f"revoked {token.name} ({token.prefix}…)")
            elif rotate:
                token, clear = token_rotate(name=rotate)
                self.stdout.write(clear)
                self.stderr.write(f"token {token.name}: new secret — shown once, the old one no longer works")
            elif client_webhook is not None:
                if not client:
                    raise CommandError("--client-webhook needs --client")
                owner, _ = client_ensure(name=client, actor=ACTOR)
                owner, secret = client_webhook_set(client_id=owner.pk, url=client_webhook, actor=ACTOR)
                if secret:
                    self.stdout.write(secret)
                    self.stderr.write(f"client {owner.name}: webhook {owner.webhook_url} — secret shown once")
                else:
                    where = "the global webhook" if owner.uses_global_webhook else "none (its events are not sent)"
                    self.stderr.write(f"client {owner.name}: webhook {where}")
            elif not name:
                raise CommandError("--name is required")
            else:
                token, clear = token_create(
                    name=name,
                    client=client,
                    scopes=[s.strip() for s in scopes.split(",") if s.strip()],
                    expires_days=expires_days,
                    actor=ACTOR,
                )
                self.stdout.write(clear)
                self.stderr.write(
                    f"token {token.name} of client {token.client.name} with scopes {', '.join(token.scopes)}"
                    " — shown once, store it now"
                )
        except JobInputError as exc:
            raise CommandError(str(exc)) from None
