"""The engine's settings, declared once, typed and checked where they are used: Django's settings are
read at start-up (``jobs/apps.py``, again when a test overrides one) into ``EngineOptions`` and
handed to the engine through ``current()``; nothing else in jobs/ reads ``django.conf``
(tests/engine/test_options.py keeps it so).

| setting | option |
| --- | --- |
| ``LEITSTAND_HOST_NAME`` | ``host_name``: names this host in lease owners and leader terms |
| ``LEITSTAND_PATHS["slow_factor"]``, ``["min_samples"]`` | ``path_slow_factor``, ``path_min_samples`` |
| ``LEITSTAND_WEBHOOK`` | ``webhook``: the global webhook (``url``, ``secret``, ``events``, ``job_types``) |
| ``LEITSTAND_TRACE_DATABASE`` | ``trace_database``: with traces recorded, a span per SQL statement |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Generic, TypeVar

from django.core.exceptions import ImproperlyConfigured

from jobs.models import State

# A job's entry into one of these states is an event (``job.<state>``), written to the outbox by the
# trigger of jobs/functions.sql (jobs_transition_webhook_outbox); a test compares the two lists.
REPORTED_STATES = (State.DONE, State.DEAD, State.READY_FOR_REVIEW)
# Every event a webhook may subscribe to (jobs/webhooks.py records them).
EVENT_KINDS = (*(f"job.{state}" for state in REPORTED_STATES), "recheck_plan.ended", "batch.finished")
SETTINGS = ("LEITSTAND_HOST_NAME", "LEITSTAND_PATHS", "LEITSTAND_WEBHOOK", "LEITSTAND_TRACE_DATABASE")


class OptionError(ImproperlyConfigured):
    """A setting Leitstand cannot run with; the message names the setting."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise OptionError(message)


def require_number(value: object, setting: str, *, minimum: float, whole: bool = False) -> None:
    """``value`` is a number (a whole one if ``whole``) of at least ``minimum``; else ``setting`` is named."""
    kinds = (int,) if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value < minimum:
        kind = "a whole number" if whole else "a number"
        raise OptionError(f"{setting} must be {kind} of at least {minimum:g}, not {value!r}")


SIGNATURE_FORMS = ("both", "leitstand", "standard")


@dataclass(frozen=True)
class WebhookOptions:
    url: str = ""
    secret: str = ""
    events: tuple[str, ...] = ()
    job_types: tuple[str, ...] = ()  # empty: every job type
    signatures: str = "both"  # which signatures deliveries carry: both, leitstand, standard

    def __post_init__(self) -> None:
        _require(
            self.signatures in SIGNATURE_FORMS,
            f"LEITSTAND_WEBHOOK_SIGNATURES is {self.signatures!r}; it is one of {', '.join(SIGNATURE_FORMS)}",
        )
        _require(
            not self.url or bool(self.secret),
            "LEITSTAND_WEBHOOK_URL is set but LEITSTAND_WEBHOOK_SECRET is empty: every webhook is signed; "
            "set a long random secret and give it to the receiver",
        )
        unknown = sorted(set(self.events) - set(EVENT_KINDS))
        _require(
            not unknown,
            f"LEITSTAND_WEBHOOK_EVENTS names unknown events: {', '.join(unknown)} (known: {', '.join(EVENT_KINDS)})",
        )


@dataclass(frozen=True)
class EngineOptions:
    host_name: str
    path_slow_factor: float
    path_min_samples: int
    webhook: WebhookOptions
    trace_database: bool

    def __post_init__(self) -> None:
        # LEITSTAND_HOST_NAME is checked where it is read from the environment (config/settings.py).
        _require(self.path_slow_factor >= 1, "LEITSTAND_PATHS_SLOW_FACTOR must be at least 1")
        _require(
            isinstance(self.path_min_samples, int) and self.path_min_samples >= 1,
            "LEITSTAND_PATHS_MIN_SAMPLES must be a whole number of at least 1",
        )

    @classmethod
    def from_settings(cls, settings) -> EngineOptions:
        """From Django's settings object (the caller's: jobs/ does not import django.conf)."""
        hook = settings.LEITSTAND_WEBHOOK
        return cls(
            host_name=settings.LEITSTAND_HOST_NAME,
            path_slow_factor=settings.LEITSTAND_PATHS["slow_factor"],
            path_min_samples=settings.LEITSTAND_PATHS["min_samples"],
            webhook=WebhookOptions(
                url=hook["url"],
                secret=hook["secret"],
                events=tuple(hook["events"]),
                job_types=tuple(hook.get("job_types", ())),
                signatures=hook.get("signatures", "both"),
            ),
            trace_database=settings.LEITSTAND_TRACE_DATABASE,
        )


def frozen(value: Mapping) -> Mapping:
    """A read-only copy of a nested dictionary setting."""
    return MappingProxyType({key: frozen(item) if isinstance(item, Mapping) else item for key, item in value.items()})


def follow_settings(names: tuple[str, ...], configure: Callable[[], None], *, uid: str) -> None:
    """Call ``configure`` now and again whenever a test overrides one of the settings ``names`` (the
    engine's and the runtime's apps read their options this way)."""
    from django.core.signals import setting_changed

    def reconfigure(*, setting, **kwargs):
        if setting in names:
            configure()

    configure()
    setting_changed.connect(reconfigure, weak=False, dispatch_uid=uid)


def options_follow(module, options_type, settings) -> None:
    """An app's options (``module``: its ``options`` module, with ``SETTINGS``, ``configure``) built
    from Django's ``settings`` at start-up and again when a test overrides one of them; called from
    the app's ``ready()``, the one place it reads the settings. A refusal (``OptionError``) stops
    start-up there, naming the setting."""
    follow_settings(
        module.SETTINGS, lambda: module.configure(options_type.from_settings(settings)), uid=module.__name__
    )


T = TypeVar("T")


class Current(Generic[T]):
    """An app's options as its ``ready()`` configured them (``configure``), read where they are used
    (``get``, the module's ``current()``)."""

    def __init__(self, whose: str, where: str) -> None:
        self.whose, self.where = whose, where
        self._options: T | None = None

    def configure(self, options: T) -> None:
        self._options = options

    def get(self) -> T:
        if self._options is None:
            raise RuntimeError(f"{self.whose} options are not configured yet ({self.where} does it)")
        return self._options


_options: Current[EngineOptions] = Current("the engine's", "jobs.apps.JobsConfig.ready")
configure, current = _options.configure, _options.get
