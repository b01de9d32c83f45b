"""Alerting's settings, typed and checked here: read at start-up (``alerts/apps.py``, again when a test
overrides one) into ``AlertingOptions`` and handed to the rules, routes, notifications and business
rules through ``current()``.

| setting | option |
| --- | --- |
| ``LEITSTAND_ALERTS``, ``LEITSTAND_ALERT_INTERVAL_SECONDS`` | ``rules``, ``interval_seconds`` |
| ``LEITSTAND_ALERT_ROUTES``, ``LEITSTAND_ALERT_FALLBACK_ROUTE`` | ``routes``, ``fallback_route`` |
| ``LEITSTAND_ALERTMANAGER_REPOST_SECONDS``, ``LEITSTAND_PUBLIC_URL`` | ``alertmanager_repost_seconds``, ``public_url`` |
| ``LEITSTAND_NOTIFY["http_timeout_seconds"]`` | ``http_timeout_seconds`` (the type's timing is the runtime's) |
| ``LEITSTAND_BUSINESS_RULES``, ``LEITSTAND_BUSINESS_RULES_SECONDS`` | ``business_rules``, ``business_rules_seconds`` |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jobs.options import Current, OptionError, frozen, require_number

SETTINGS = (
    "LEITSTAND_ALERTS",
    "LEITSTAND_ALERT_INTERVAL_SECONDS",
    "LEITSTAND_ALERT_ROUTES",
    "LEITSTAND_ALERT_FALLBACK_ROUTE",
    "LEITSTAND_ALERTMANAGER_REPOST_SECONDS",
    "LEITSTAND_PUBLIC_URL",
    "LEITSTAND_NOTIFY",
    "LEITSTAND_BUSINESS_RULES",
    "LEITSTAND_BUSINESS_RULES_SECONDS",
)


@dataclass(frozen=True)
class AlertingOptions:
    """The alert rules' thresholds, the routes the setting declares, how notifications are sent, and
    the business rules (docs/operations.md, "Alerts")."""

    rules: Mapping[str, Mapping]
    interval_seconds: float
    routes: Mapping[str, Mapping]
    fallback_route: str
    alertmanager_repost_seconds: float
    public_url: str
    http_timeout_seconds: float
    business_rules: Mapping[str, Mapping]
    business_rules_seconds: float

    def __post_init__(self) -> None:
        require_number(self.interval_seconds, "LEITSTAND_ALERT_INTERVAL_SECONDS", minimum=0.1)
        require_number(self.alertmanager_repost_seconds, "LEITSTAND_ALERTMANAGER_REPOST_SECONDS", minimum=1)
        require_number(self.http_timeout_seconds, 'LEITSTAND_NOTIFY["http_timeout_seconds"]', minimum=0.01)
        require_number(self.business_rules_seconds, "LEITSTAND_BUSINESS_RULES_SECONDS", minimum=1)
        if not self.fallback_route:
            raise OptionError("LEITSTAND_ALERT_FALLBACK_ROUTE must name a route")
        for setting, value in (("LEITSTAND_ALERTS", self.rules), ("LEITSTAND_BUSINESS_RULES", self.business_rules)):
            wrong = sorted(name for name, config in value.items() if not isinstance(config, Mapping))
            if wrong:
                raise OptionError(f"{setting}[{wrong[0]!r}] must be an object of the rule's options")
        # A route's own fields are checked with their limits by leitstand.E014.

    def rule_option(self, rule: str, key: str, scope: str = "", default=None):
        """A rule's setting, overridden for the scope when ``LEITSTAND_ALERTS[rule]["overrides"][scope]`` says so."""
        config = self.rules[rule]
        return config.get("overrides", {}).get(scope, {}).get(key, config.get(key, default))

    @classmethod
    def from_settings(cls, settings) -> AlertingOptions:
        if not isinstance(settings.LEITSTAND_ALERT_ROUTES, Mapping):
            raise OptionError("LEITSTAND_ALERT_ROUTES must be a JSON object: route name → its contacts")
        return cls(
            rules=frozen(settings.LEITSTAND_ALERTS),
            interval_seconds=settings.LEITSTAND_ALERT_INTERVAL_SECONDS,
            routes=frozen(settings.LEITSTAND_ALERT_ROUTES),
            fallback_route=settings.LEITSTAND_ALERT_FALLBACK_ROUTE,
            alertmanager_repost_seconds=settings.LEITSTAND_ALERTMANAGER_REPOST_SECONDS,
            public_url=settings.LEITSTAND_PUBLIC_URL,
            http_timeout_seconds=settings.LEITSTAND_NOTIFY["http_timeout_seconds"],
            business_rules=frozen(settings.LEITSTAND_BUSINESS_RULES),
            business_rules_seconds=settings.LEITSTAND_BUSINESS_RULES_SECONDS,
        )


_options: Current[AlertingOptions] = Current("alerting's", "alerts.apps.AlertsConfig.ready")
configure, current = _options.configure, _options.get
