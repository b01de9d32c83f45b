"""What Django's error pages and error mails may show (``LEITSTAND_DEBUG=true``, ``ADMINS``): every
setting and request variable whose name suggests a secret is masked — Django's list, plus URLs
(``DATABASE_URL`` carries the password, a webhook URL its token), routes and DSNs."""

import re

from django.views.debug import SafeExceptionReporterFilter


class SecretsFilter(SafeExceptionReporterFilter):
    hidden_settings = re.compile(
        "API|AUTH|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|URL|DSN|ROUTE|DATABASE|WEBHOOK|EMAIL_HOST_USER",
        flags=re.IGNORECASE,
    )
