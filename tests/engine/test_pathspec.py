"""The path pattern language and the judgement of observed paths: conforming paths and each kind of
divergence, on constructed step events."""

import pytest

from jobs.pathspec import Observed, PathSpec, PathSpecError

CRAWL = PathSpec.parse("-> skipped", "robots -> skipped", "robots fetch extract candidates spawn")


def seen(*steps, exit="done"):
    return Observed(tuple((s.rstrip("!"), "failed" if s.endswith("!") else "ok") for s in steps), exit)


def test_patterns_expand_to_every_declared_path():
    spec = PathSpec.parse("plan robots? (fetch compare?)? decide -> done | skipped", "plan -> skipped")
    steps_done = {steps for steps, exit in spec.paths if exit == "done"}
    assert steps_done == {
        ("plan", "decide"),
        ("plan", "robots", "decide"),
        ("plan", "fetch", "decide"),
        ("plan", "robots", "fetch", "decide"),
        ("plan", "fetch", "compare", "decide"),
        ("plan", "robots", "fetch", "compare", "decide"),
    }
    assert (("plan",), "skipped") in spec.paths and (("plan",), "done") not in spec.paths
    assert PathSpec.parse("a (b | c d) e").paths == {(("a", "b", "e"), "done"), (("a", "c", "d", "e"), "done")}


@pytest.mark.parametrize(
    "pattern,message",
    [
        ("a (b", "not closed"),
        ("a ) b", "unexpected"),
        ("? a", "must follow"),
        ("a -> finished", "exits"),
        ("a -> done b", "exits"),
        ("a (| b)", "empty alternative"),
        ("Fetch", "cannot read"),
    ],
)
def test_malformed_patterns_are_refused_with_the_reason(pattern, message):
    with pytest.raises(PathSpecError, match=message):
        PathSpec.parse(pattern)


@pytest.mark.parametrize(
    "observed",
    [
        seen("robots", "fetch", "extract", "candidates", "spawn"),
        seen("robots", exit="skipped"),
        seen(exit="skipped"),
        seen("robots", "fetch!", exit="failed"),  # a failure on a declared path: the retry policy's business
        seen(exit="failed"),
    ],
)
def test_conforming_paths(observed):
    assert CRAWL.judge(observed).conforms


@pytest.mark.parametrize(
    "observed,kind,text",
    [
        (seen("robots", "fetch", "candidates", "spawn"), "missing_step", "missing step extract"),
        (
            seen("robots", "fetch", "extract", "thumbnail", "candidates", "spawn"),
            "unexpected_step",
            "unexpected step thumbnail",
        ),
        (
            seen("robots", "fetch", "extract", "candidates", "spawn", "fetch"),
            "unexpected_step",
            "unexpected step fetch",
        ),
        (
            seen("robots", "extract", "fetch", "candidates", "spawn"),
            "wrong_order",
            "wrong order: extract ran where fetch",
        ),
        (seen("robots", "fetch", exit="done"), "silent_exit", "goes on with extract"),
        (seen("robots", exit="done"), "unexpected_exit", "declared exits there: skipped"),
        (seen("robots", "fetch", "extract", "candidates", "spawn", exit="review"), "unexpected_exit", "ended review"),
        (seen("robots", "spawn!", exit="failed"), "missing_step", "missing step fetch"),
    ],
)
def test_each_kind_of_divergence_is_named(observed, kind, text):
    verdict = CRAWL.judge(observed)
    assert not verdict.conforms and verdict.kind == kind and text in verdict.divergence, verdict


def test_the_signature_marks_failed_and_skipped_steps():
    observed = Observed((("robots", "ok"), ("compare", "skipped"), ("fetch", "failed")), "failed")
    assert observed.signature == "robots > compare~ > fetch! -> failed"
    assert Observed((), "skipped").signature == "(no steps) -> skipped"
