"""Changing an API client's webhook, as people do it (the console's client page, ``create_api_token
--client-webhook``): the receiver is judged by the notification guard when it is set, as alert routes
are, so an operator learns at once that a URL cannot be used instead of from a dead delivery later.
Each delivery is judged again, and its POST pinned to the address checked (DNS may change)."""

from jobs import clients
from jobs.models import Client
from jobs.services import JobInputError
from workers.pipeline.http import destination_refusal


def client_webhook_set(*, client_id: int, url: str, actor: str, user=None) -> tuple[Client, str]:
    """``jobs.clients.client_webhook_set`` for a URL the guard accepts ('' and 'none' need no check);
    the person's permission is checked first, so nobody else makes the guard resolve names."""
    clients.clients_require(user)
    candidate = (url or "").strip()
    if candidate and candidate.lower() != "none":
        refused = destination_refusal(candidate)
        if refused:
            raise JobInputError("webhook_url", refused)
    return clients.client_webhook_set(client_id=client_id, url=url, actor=actor, user=user)
