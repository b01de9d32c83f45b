"""The job-type registry: every job type declares how it runs, once.

A declaration names the handler, the pool, the timeout, the lease and heartbeat timing, the retry
policy, the default priority, the payload schema version, the handler's processing version and its
expected step paths. Start-up fails loudly (``ImproperlyConfigured``) on a duplicate or incomplete
declaration; the timing invariants between these numbers are Django system checks
(``config/checks.py``), so ``manage.py check`` reports every violation at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from django.core.exceptions import ImproperlyConfigured

from jobs.pathspec import PathSpec, PathSpecError
from jobs.retry import RetryPolicy
from jobs.services import flow_key_check


class UnknownJobType(LookupError):
    def __init__(self, name: str, known: list[str]) -> None:
        super().__init__(f"unknown job type {name!r}; registered types: {', '.join(known) or 'none'}")
        self.name = name


@dataclass(frozen=True)
class JobType:
    name: str
    handler: Callable
    pool: str
    timeout_seconds: float
    lease_seconds: float
    heartbeat_seconds: float
    retry: RetryPolicy
    processing_version: str
    # The step paths one attempt may take, in the pattern language of jobs/pathspec.py, e.g.
    # ("robots -> skipped", "robots fetch extract candidates spawn"); see docs/paths.md.
    expected_paths: tuple[str, ...]
    default_priority: int = 5
    schema_version: int = 1
    # The longest timeout of any external call the handler makes (HTTP, subprocess): below the job's.
    external_call_timeout_seconds: float = 0.0
    # A synthetic job may name its pool in the payload; every other type runs in its own pool.
    may_choose_pool: bool = False
    # The scope an API client needs to submit jobs of this type; None: an internal type, created only
    # by the services that own it (webhook deliveries, alert notifications, rechecks, shadow runs).
    client_scope: str | None = None
    # The system's own deliveries (webhooks, alert notifications, shadow runs) are outside every API
    # client's view, ``jobs:all`` included: a client that could list or cancel them could silence
    # pages and other clients' events.
    is_system_only: bool = False
    # How many info lines a handler logs during one attempt the attempt keeps (its warnings and errors
    # are always kept, up to jobs/logs.LINES_KEPT in all): shown beside its steps on the job page.
    log_info_lines: int = 0
    # What its jobs share their pool by (jobs.services.flow_key_of): '' (one line for all), "source",
    # "client" (the API client that submitted it), "host" (of its subject URL) or "payload.<field>".
    # Keys at equal priority get weighted fair shares of the pool; an operator can limit or pause one.
    flow_key: str = ""
    # How many of one key's jobs may hold leases at once in its pool, unless an operator set the key's
    # own limit; None: no limit (the smallest of a pool's types' limits applies to the pool).
    flow_limit: int | None = None
    description: str = field(default="", compare=False)
    # Checks a payload at submission (raises PermanentError naming the field): a job the handler
    # would refuse is refused before it exists (the API answers 422).
    parse_payload: Callable[[dict], object] | None = field(default=None, compare=False)
    # What a job of this type is about, read from its payload at submission (stored and indexed as
    # the job's subject: the console and the API find jobs by its prefix); None: no subject.
    subject: Callable[[dict], str] | None = field(default=None, compare=False)
    # Other handler versions (processing version → handler) for shadow runs on the same input.
    shadow_versions: Mapping[str, Callable] = field(default_factory=dict, compare=False)
    paths: PathSpec = field(init=False, compare=False, repr=False)  # compiled from expected_paths

    def subject_of(self, payload) -> str:
        """What a job of this type with ``payload`` is about ('' without a subject, or for a payload
        that is no object: the insert refuses it)."""
        return str(self.subject(payload) or "") if self.subject is not None and isinstance(payload, dict) else ""

    def __post_init__(self) -> None:
        problems = []
        if not self.name or not self.name.replace("_", "").isalnum() or not self.name[0].isalpha():
            problems.append("name must start with a letter and contain only letters, digits and '_'")
        if not callable(self.handler):
            problems.append("handler must be callable")
        if not self.pool:
            problems.append("pool is required")
        for attribute in ("timeout_seconds", "lease_seconds", "heartbeat_seconds"):
            if not getattr(self, attribute) or getattr(self, attribute) <= 0:
                problems.append(f"{attribute} must be positive")
        if not isinstance(self.retry, RetryPolicy):
            problems.append("retry must be a jobs.retry.RetryPolicy")
        if not self.processing_version:
            problems.append("processing_version is required (it is recorded on every attempt)")
        try:
            object.__setattr__(self, "paths", PathSpec.parse(*self.expected_paths))
        except (PathSpecError, TypeError) as exc:
            problems.append(f"expected_paths: {exc}")
        if not 0 <= self.default_priority <= 9:
            problems.append("default_priority must be 0..9")
        try:
            flow_key_check(self.flow_key)
        except ValueError as exc:
            problems.append(str(exc))
        if self.flow_limit is not None and (not isinstance(self.flow_limit, int) or self.flow_limit < 1):
            problems.append("flow_limit must be a whole number of at least 1, or None")
        if self.schema_version < 1:
            problems.append("schema_version must be at least 1")
        if problems:
            raise ImproperlyConfigured(f"job type {self.name!r} is incomplete: " + "; ".join(problems))


# How an app makes a job type known in a process that has not met it yet: given the type's name, a
# job's payload and the pool that claimed it, it registers the type (e.g. by importing the module that defines it) or raises
# (jobs.errors.PermanentError: the job can never run; a jobs.errors.Deferred: not here, not now —
# handed back without using a retry; anything else fails the attempt as its class says).
Resolver = Callable[[str, dict, str], None]


class Registry:
    def __init__(self) -> None:
        self._types: dict[str, JobType] = {}
        self._resolvers: dict[str, Resolver] = {}
        self._resolving = threading.Lock()

    def register(self, job_type: JobType) -> JobType:
        if job_type.name in self._types:
            raise ImproperlyConfigured(f"job type {job_type.name!r} is registered twice")
        self._types[job_type.name] = job_type
        return job_type

    def get(self, name: str) -> JobType:
        try:
            return self._types[name]
        except KeyError:
            raise UnknownJobType(name, sorted(self._types)) from None

    def known(self, name: str) -> bool:
        return name in self._types

    def resolver_register(self, prefix: str, resolver: Resolver) -> None:
        """Types named ``prefix…`` that this process has not registered are resolved by ``resolver``
        when a pool meets one (Django tasks: ``task__``, by importing the task's module)."""
        self._resolvers[prefix] = resolver

    def resolve(self, name: str, payload, pool: str) -> JobType:
        """The type ``name``, made known first by the resolver of its prefix when it is not yet, for a
        job with ``payload`` that ``pool`` claimed (one resolution at a time: the threads of a pool with
        many jobs in flight meet a type once)."""
        if name in self._types:
            return self._types[name]
        resolver = next((r for prefix, r in self._resolvers.items() if name.startswith(prefix)), None)
        if resolver is None:
            return self.get(name)  # UnknownJobType
        with self._resolving:
            if name not in self._types:
                resolver(name, payload if isinstance(payload, dict) else {}, pool)
        return self.get(name)

    def all(self) -> list[JobType]:
        return sorted(self._types.values(), key=lambda t: t.name)

    def for_pool(self, pool: str) -> list[JobType]:
        """Types whose jobs this pool may run: its own, and those that may choose any pool."""
        return [t for t in self.all() if t.pool == pool or t.may_choose_pool]

    def flow_limit(self, pool: str) -> int | None:
        """The default running limit per flow key in ``pool``: the smallest its types declare."""
        limits = [t.flow_limit for t in self.for_pool(pool) if t.flow_limit is not None and t.pool == pool]
        return min(limits) if limits else None

    def pools_keyed_by(self, declaration: str) -> list[str]:
        """The pools of the types whose jobs share their pool by ``declaration`` ("host": whose claim
        the pipeline's politeness tells when each host may next be asked)."""
        return sorted({t.pool for t in self.all() if t.flow_key == declaration and t.pool})

    def pools(self) -> set[str]:
        """Every pool a registered type runs in."""
        return {t.pool for t in self.all() if t.pool}

    def client_pools(self) -> set[str]:
        """The pools API clients' jobs run in (a submittable type's own pool): the others carry only
        the system's work (notifications, webhook deliveries, rechecks, tasks), which no client steers."""
        return {t.pool for t in self.submittable() if t.pool}

    def system_only(self) -> list[str]:
        """The names of the types no API client sees."""
        return sorted(t.name for t in self._types.values() if t.is_system_only)

    def submittable(self) -> list[JobType]:
        """The types API clients may submit."""
        return [t for t in self.all() if t.client_scope is not None]

    def unregister(self, name: str) -> None:
        """For tests that declare throw-away types."""
        self._types.pop(name, None)


registry = Registry()
register = registry.register
