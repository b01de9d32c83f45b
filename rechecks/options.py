"""The rechecks' settings, declared once, typed and checked here: Django's settings are read at
start-up (``rechecks/apps.py``, again when a test overrides one) into ``RecheckOptions`` and handed to
the planner, the services and the handler through ``current()``; nothing else in rechecks/ reads
``django.conf`` (tests/rechecks/test_options.py keeps it so).

| setting | option |
| --- | --- |
| ``LEITSTAND_RECHECK`` (``LEITSTAND_RECHECK_*``) | ``target`` and ``policy``: copied into each plan when it is made |
| ``LEITSTAND_RECHECK_SECOND_OPINION_AGENT`` | ``second_opinion_agent``: who asks again when the crawler is told "gone" |
| ``LEITSTAND_RECHECK_PLANS_PER_ROUND`` | ``plans_per_round``: the planner sweep's round |
"""

from __future__ import annotations

from dataclasses import dataclass

from jobs.options import Current, OptionError, require_number
from rechecks.policy import RecheckPolicy, Target

SETTINGS = ("LEITSTAND_RECHECK", "LEITSTAND_RECHECK_SECOND_OPINION_AGENT", "LEITSTAND_RECHECK_PLANS_PER_ROUND")


@dataclass(frozen=True)
class RecheckOptions:
    target: Target
    policy: RecheckPolicy
    second_opinion_agent: str
    plans_per_round: int

    def __post_init__(self) -> None:
        require_number(self.plans_per_round, "LEITSTAND_RECHECK_PLANS_PER_ROUND", minimum=1, whole=True)
        if not self.second_opinion_agent.strip():
            raise OptionError("LEITSTAND_RECHECK_SECOND_OPINION_AGENT is empty: name the browser it asks as")

    @classmethod
    def from_settings(cls, settings) -> RecheckOptions:
        """From Django's settings object (the caller's: rechecks/ does not import django.conf)."""
        values = dict(settings.LEITSTAND_RECHECK)
        target = values.pop("target", None)
        if target not in {t.value for t in Target}:
            raise OptionError(
                f"LEITSTAND_RECHECK_TARGET must be one of: {', '.join(t.value for t in Target)}, not {target!r} "
                "(gone: 404/410 only; gone_or_changed: also when the content no longer matches)"
            )
        try:
            policy = RecheckPolicy(**values)
        except (TypeError, ValueError) as refused:
            raise OptionError(f"LEITSTAND_RECHECK_*: {refused} (docs/operations.md)") from refused
        return cls(
            target=Target(target),
            policy=policy,
            second_opinion_agent=settings.LEITSTAND_RECHECK_SECOND_OPINION_AGENT,
            plans_per_round=settings.LEITSTAND_RECHECK_PLANS_PER_ROUND,
        )


_options: Current[RecheckOptions] = Current("the rechecks'", "rechecks.apps.RechecksConfig.ready")
configure, current = _options.configure, _options.get
