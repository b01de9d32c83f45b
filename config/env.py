"""Typed reads of environment variables, with errors that name the variable.

Each call in ``config/settings.py`` is the one declaration of its setting: the variable, its type
(the function), its default, its bounds (``minimum``) and one line of documentation (``doc``), from
which docs/operations.md's settings table is made (``python -m config.settings_table``; a test keeps
the two equal). A typed option is built from the setting it gives and keeps no default of its own.
"""

from __future__ import annotations

import json
import os

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "", *, doc: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool, *, doc: str) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use one of: 1, 0, true, false, yes, no)")


def env_int(name: str, default: int, *, minimum: int | None = None, doc: str) -> int:
    return _env_number(name, default, minimum, int, "an integer")


def env_float(name: str, default: float, *, minimum: float | None = None, doc: str) -> float:
    return _env_number(name, default, minimum, float, "a number")


def _env_number(name, default, minimum, parse, kind):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = parse(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not {kind}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}")
    return value


def env_list(name: str, default: list[str], *, doc: str) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_json(name: str, default, *, doc: str):
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from None
