"""The API's side of tested receipt: an automated receiver of a route's test notification confirms
it with the token the test carried (``POST /api/v1/alert-tests/confirm``, scope ``alerts:confirm``).
A resource like the others, mounted by ``api/site.py``; the receipts are alerting's (below the API)."""

from __future__ import annotations

from datetime import datetime

from ninja import Field, Router, Schema
from ninja.errors import HttpError

from alerts.receipts import ReceiptAlreadyConfirmed, receipt_confirm
from api.auth import require
from api.fields import Text
from jobs.services import JobInputError

router = Router(tags=["alerts"])


class ConfirmIn(Schema):
    token: Text = Field(min_length=1, max_length=1000, description="The token the test notification carried.")


class ConfirmOut(Schema):
    route: str
    test_id: int
    sent_at: datetime
    confirmed_at: datetime
    confirmed_by: str


@router.post("/alert-tests/confirm", response=ConfirmOut, summary="Confirm receipt of a route's test notification")
def alert_test_confirm(request, body: ConfirmIn):
    """Once per test: a second use answers 409; a forged or unknown token 422."""
    require(request, "alerts:confirm")
    try:
        test = receipt_confirm(token=body.token, actor=f"api:{request.auth.client.name}", via="api")
    except ReceiptAlreadyConfirmed as used:
        raise HttpError(409, used.message) from None
    except JobInputError as refused:
        raise HttpError(422, refused.message) from None
    return {
        "route": test.route.name,
        "test_id": test.pk,
        "sent_at": test.sent_at,
        "confirmed_at": test.confirmed_at,
        "confirmed_by": test.confirmed_by,
    }
