"""Console sessions end after ``LEITSTAND_CONSOLE_IDLE_HOURS`` without a request (default 12), not
Django's fixed 14 days: an operator's forgotten login on a shared machine keeps no power for weeks.

Django sets a session's expiry when it saves it, so a session touched now and then slides its expiry
along while it is used. It is touched at most once a minute: a console page polls its live parts every
few seconds, and a write per request would cost the database more than the page itself.
"""

from __future__ import annotations

import time

TOUCH_EVERY_SECONDS = 60


class SessionIdleMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        session = getattr(request, "session", None)
        # Only a signed-in person's session: touching a made-up cookie's would store a new session
        # row for every anonymous request.
        if session is not None and request.user.is_authenticated:
            now = int(time.time())
            if now - session.get("_touched", 0) >= TOUCH_EVERY_SECONDS:
                session["_touched"] = now  # modified: saved with a fresh expiry at the response
        return self.get_response(request)
