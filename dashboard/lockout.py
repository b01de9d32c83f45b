"""The console's answer to a locked-out login (django-axes' ``AXES_LOCKOUT_CALLABLE``): 429 with the
cool-off as ``Retry-After`` (RFC 9110 §10.2.3), so a person's browser and a script both learn when
they may try again."""

from __future__ import annotations

import math

from axes.helpers import get_cool_off, get_lockout_message
from django.http import HttpResponse

TOO_MANY_REQUESTS = 429  # django-axes' own answer (AXES_HTTP_RESPONSE_CODE), kept


def lockout_response(request, original_response=None, credentials=None) -> HttpResponse:
    response = HttpResponse(get_lockout_message(), status=TOO_MANY_REQUESTS, content_type="text/plain")
    cool_off = get_cool_off(request)
    if cool_off:
        response["Retry-After"] = str(max(1, math.ceil(cool_off.total_seconds())))
    return response
