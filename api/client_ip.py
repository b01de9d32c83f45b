"""The client's address as the login lockout (django-axes) and the API's address budget see it.

Directly exposed, it is ``REMOTE_ADDR``. Behind ``LEITSTAND_TRUSTED_PROXIES`` reverse proxies (each
appends the address it received the request from to ``X-Forwarded-For``), it is the entry the
outermost trusted proxy appended: the proxies-th from the right. Whatever a client writes into the
header itself stands to the left of that and is never used, so a changing ``X-Forwarded-For`` cannot
move a client out of its lockout, nor lock out a named user for everyone else.
"""

import ipaddress

from api import options


def client_ip(request) -> str:
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = options.current().trusted_proxies
    if not proxies:
        return remote
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if part.strip()]
    if len(forwarded) < proxies:
        return remote  # not through the expected chain of proxies: the peer is all we know
    candidate = forwarded[-proxies]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote
