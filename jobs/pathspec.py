"""Expected execution paths: a small pattern language, and the comparison of what an attempt did
with what its job type declares.

A pattern is a sequence of step names, ending in the attempt's *exit*::

    robots fetch extract candidates spawn          # exit omitted: -> done
    robots -> skipped                              # an explicit early exit
    -> skipped                                     # skipped before any step
    plan robots? (fetch compare?)? decide -> done | skipped
    fetch (decode | transcode) store? -> recheck

- ``name?`` — an optional step; ``(a b | c)`` — alternatives (each a sequence); ``(…)?`` — an
  optional group; ``-> a | b`` — either exit. Patterns expand to a finite set of (steps, exit) pairs.
- Exits: ``done`` (the result is stored or settled), ``skipped`` (the handler's Skipped),
  ``recheck`` (a recheck plan follows), ``review`` (the case goes to a person), ``failed``.

A *failed* attempt conforms when its steps are a prefix of a declared path (its error is recorded
on the attempt): failures are the retry policy's business, not the path's. An attempt that was
released, expired or cancelled is not judged.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

EXITS = ("done", "skipped", "recheck", "review", "failed")
_TOKEN = re.compile(r"\s*(->|\(|\)|\||\?|[a-z][a-z0-9_]*)")


class PathSpecError(ValueError):
    pass


# How a step's outcome shows in a path's signature: "fetch!" failed, "robots~" skipped, "fetch="
# unchanged (a conditional request answered 304).
STEP_MARKS = {"failed": "!", "skipped": "~", "unchanged": "="}


@dataclass(frozen=True)
class Observed:
    """What one attempt did: its steps in order (name, outcome: ok|failed|skipped|unchanged) and its exit."""

    steps: tuple[tuple[str, str], ...]
    exit: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.steps)

    @property
    def signature(self) -> str:
        steps = " > ".join(name + STEP_MARKS.get(outcome, "") for name, outcome in self.steps) or "(no steps)"
        return f"{steps} -> {self.exit}"


@dataclass(frozen=True)
class Verdict:
    conforms: bool
    divergence: str = ""  # what diverged, for a person: "missing step decode (declared: …)"
    kind: str = ""  # missing_step | unexpected_step | wrong_order | silent_exit | unexpected_exit | no_match


@dataclass(frozen=True)
class PathSpec:
    patterns: tuple[str, ...]
    paths: frozenset[tuple[tuple[str, ...], str]]

    @classmethod
    def parse(cls, *patterns: str) -> PathSpec:
        if not patterns:
            raise PathSpecError("declare at least one path")
        paths: set[tuple[tuple[str, ...], str]] = set()
        for pattern in patterns:
            paths |= _expand_pattern(pattern)
        return cls(tuple(patterns), frozenset(paths))

    @property
    def step_names(self) -> set[str]:
        return {name for steps, _ in self.paths for name in steps}

    def judge(self, observed: Observed) -> Verdict:
        names, exit = observed.names, observed.exit
        if (names, exit) in self.paths:
            return Verdict(True)
        sequences = sorted({steps for steps, _ in self.paths}, key=lambda s: (len(s), s))
        if exit == "failed" and any(steps[: len(names)] == names for steps in sequences):
            return Verdict(True)
        same = [e for steps, e in self.paths if steps == names]
        if same:
            return Verdict(
                False,
                f"ended {exit} after {_show(names)}; declared exits there: {', '.join(sorted(same))}",
                "unexpected_exit",
            )
        longer = [steps for steps in sequences if len(steps) > len(names) and steps[: len(names)] == names]
        if longer and exit != "failed":
            return Verdict(
                False,
                f"silent exit: ended {exit} after {_show(names)} without a declared exit there; "
                f"the declared path goes on with {longer[0][len(names)]}",
                "silent_exit",
            )
        unknown = [name for name in names if name not in self.step_names]
        if unknown:
            return Verdict(False, f"unexpected step {unknown[0]} (no declared path has it)", "unexpected_step")
        for steps in sequences:
            if Counter(steps) == Counter(names):
                first = next(i for i, (a, b) in enumerate(zip(names, steps)) if a != b)
                return Verdict(
                    False,
                    f"wrong order: {names[first]} ran where {steps[first]} was declared (declared: {_show(steps)})",
                    "wrong_order",
                )
        for steps in sequences:
            if _is_subsequence(names, steps):
                missing = _first_difference(names, steps)
                return Verdict(False, f"missing step {missing} (declared: {_show(steps)})", "missing_step")
        for steps in reversed(sequences):  # the longest declared path the observed one extends
            if _is_subsequence(steps, names):
                extra = _first_difference(steps, names)
                return Verdict(False, f"unexpected step {extra} (declared: {_show(steps)})", "unexpected_step")
        return Verdict(False, f"no declared path matches {_show(names)}", "no_match")


def _show(steps: tuple[str, ...]) -> str:
    return " > ".join(steps) or "no steps"


def _is_subsequence(short: tuple[str, ...], long: tuple[str, ...]) -> bool:
    remaining = iter(long)
    return all(name in remaining for name in short)


def _first_difference(short: tuple[str, ...], long: tuple[str, ...]) -> str:
    """The first element of ``long`` that a greedy walk of ``short`` through it skips."""
    index = 0
    for name in long:
        if index < len(short) and short[index] == name:
            index += 1
        else:
            return name
    return long[-1]


# --- parsing ---------------------------------------------------------------------------------------


def _expand_pattern(pattern: str) -> set[tuple[tuple[str, ...], str]]:
    tokens = _tokenize(pattern)
    exits = ["done"]
    if "->" in tokens:
        at = tokens.index("->")
        exits = tokens[at + 1 :][::2]
        separators = tokens[at + 2 :][::2]
        if (
            not exits
            or any(e not in EXITS for e in exits)
            or any(s != "|" for s in separators)
            or len(separators) != len(exits) - 1
        ):
            raise PathSpecError(
                f"{pattern!r}: '->' must end the pattern, followed by exits separated by '|' ({', '.join(EXITS)})"
            )
        tokens = tokens[:at]
    sequences, rest = _sequence(tokens, pattern)
    if rest:
        raise PathSpecError(f"{pattern!r}: unexpected {rest[0]!r}")
    return {(steps, exit) for steps in sequences for exit in exits}


def _tokenize(pattern: str) -> list[str]:
    tokens, at = [], 0
    while at < len(pattern):
        if pattern[at:].strip() == "":
            break
        match = _TOKEN.match(pattern, at)
        if not match:
            raise PathSpecError(
                f"{pattern!r}: cannot read {pattern[at:].strip()[:20]!r} "
                "(step names are lowercase letters, digits and '_')"
            )
        tokens.append(match.group(1))
        at = match.end()
    return tokens


def _sequence(tokens: list[str], pattern: str) -> tuple[set[tuple[str, ...]], list[str]]:
    """A sequence of items up to ')' or '|' (not consumed): the set of step tuples it can be."""
    results: set[tuple[str, ...]] = {()}
    while tokens and tokens[0] not in (")", "|"):
        token = tokens[0]
        if token == "(":
            options, tokens = _group(tokens[1:], pattern)
        elif token in ("?", "->"):
            raise PathSpecError(f"{pattern!r}: {token!r} must follow a step or a group")
        else:
            options, tokens = {(token,)}, tokens[1:]
        if tokens and tokens[0] == "?":
            options, tokens = options | {()}, tokens[1:]
        results = {left + right for left in results for right in options}
        if len(results) > 10_000:
            raise PathSpecError(f"{pattern!r}: expands to more than 10,000 paths")
    return results, tokens


def _group(tokens: list[str], pattern: str) -> tuple[set[tuple[str, ...]], list[str]]:
    options: set[tuple[str, ...]] = set()
    while True:
        alternative, tokens = _sequence(tokens, pattern)
        if alternative == {()}:
            raise PathSpecError(f"{pattern!r}: an empty alternative (use '?' for optional parts)")
        options |= alternative
        if not tokens:
            raise PathSpecError(f"{pattern!r}: '(' is not closed")
        if tokens[0] == ")":
            return options, tokens[1:]
        tokens = tokens[1:]  # '|'
