"""Path-aware console pages with attempts run by a real pool runtime: path frequencies, the drop-off
per step, divergent attempts linked to their jobs (the synthetic type with a skipped step), the job
page's path, timeline and lit state diagram; the history export; and the flow snapshot."""

import io
import json

import pytest
from django.core.management import call_command

from dashboard.diagram import Edge
from dashboard.management.commands import flow_snapshot
from jobs.models import Job
from jobs.paths import attempts_check
from tests.console.test_console import login, review_case  # noqa: F401 (the fixture)
from workers.runtime.registry import registry

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def attempts(make_job, pool_runtime):
    """Five synthetic runs on the declared path, two skipping the step parse, one failing."""
    jobs = {
        "ok": [make_job("synthetic", pool="crawl", payload={"steps": ["fetch", "parse", "store"]}) for _ in range(5)],
        "skipped": [make_job("synthetic", pool="crawl", payload={"steps": ["fetch", "store"]}) for _ in range(2)],
        "failed": [make_job("synthetic", pool="crawl", payload={"steps": ["fetch"], "fail": "permanent"})],
    }
    pool_runtime("crawl").wake()
    attempts_check({t.name: t.paths for t in registry.all()})
    return jobs


def test_the_paths_page_shows_frequencies_drop_off_and_divergent_attempts(client, login, attempts):  # noqa: F811
    login("viewer")
    page = client.get("/admin/paths/?type=synthetic").content.decode()
    assert '<code>fetch &gt; parse &gt; store -&gt; done</code></td><td class="num">5</td>' in page
    assert '<code>fetch &gt; store -&gt; done</code></td><td class="num">2</td>' in page
    assert "missing step parse (declared: fetch &gt; parse &gt; store)" in page
    for job in attempts["skipped"]:
        assert f'href="/admin/jobs/job/{job.pk}/change/"' in page, "each divergent attempt links to its job"
    assert 'aria-label="8 of 8 finished"' in page, "all eight started fetch and finished it"
    assert 'aria-label="5 of 5 finished"' in page, "parse: started by five"
    assert "partial (failed or interrupted after some steps) <strong>1</strong>" in page
    assert '<th class="num">failed</th><th class="num">deferred</th>' in page, "politeness is not a failure"
    assert client.get("/admin/paths/?type=nope").status_code == 404


def test_the_job_page_shows_its_path_timeline_and_lit_diagram(client, login, attempts):  # noqa: F811
    login("viewer")
    job = attempts["skipped"][0]
    page = client.get(f"/admin/jobs/job/{job.pk}/change/").content.decode()
    assert "<code>fetch &gt; store -&gt; done</code>" in page and "missing step parse" in page
    assert page.count('<rect class="ok"') == 2, "two steps on the timeline"
    assert '<path class="edge lit"' in page and '<g class="node lit current">' in page
    assert 'id="export-json"' in page


def test_the_flow_page_draws_every_declared_transition(client, login):  # noqa: F811
    login("viewer")
    page = client.get("/admin/flow/").content.decode()
    edges = flow_snapshot.flow_declared()["transitions"]
    assert page.count('<path class="edge') == len(edges) and "decide_match" in page
    assert "robots fetch extract stylesheets? candidates spawn" in page


def test_the_export_holds_everything_and_reads_back_as_json(client, login, attempts):  # noqa: F811
    case = review_case("export")
    out = io.StringIO()
    call_command("export_job", str(case.pk), stdout=out)
    document = json.loads(out.getvalue())
    assert document["format"] == "leitstand.job-export/1" and document["job"]["id"] == str(case.pk)
    assert set(document) >= {
        "attempts",
        "transitions",
        "step_events",
        "effects",
        "review",
        "findings",
        "recheck_plan",
        "shadow_runs",
        "children",
        "audit",
        "stale_writes",
    }
    assert document["findings"][0]["verdict"] == "unclear" and document["findings"][0]["thumbnail_bytes"] > 0
    assert [t["to_state"] for t in document["transitions"]] == ["planned"]

    ran = attempts["skipped"][0]
    login("viewer")
    response = client.get(f"/admin/jobs/job/{ran.pk}/export/")
    assert response["Content-Disposition"] == f'attachment; filename="job-{ran.pk}.json"'
    exported = json.loads(response.content)
    assert [s["step"] for s in exported["step_events"]] == ["fetch", "store"]
    assert exported["attempts"][0]["path_divergence"].startswith("missing step parse")
    assert len(exported["transitions"]) == Job.objects.get(pk=ran.pk).transitions.count()


def test_the_committed_flow_snapshot_matches_the_declaration():
    committed = flow_snapshot.SNAPSHOT.read_text()
    assert flow_snapshot.flow_json() == committed, (
        "the flow changed: review the difference and run manage.py flow_snapshot --write"
    )


def test_a_transition_added_without_updating_the_snapshot_fails_the_comparison(monkeypatch):
    real = flow_snapshot.declared_edges()
    monkeypatch.setattr(flow_snapshot, "declared_edges", lambda: [*real, Edge("done", "planned", ("reopen",))])
    assert flow_snapshot.flow_json() != flow_snapshot.SNAPSHOT.read_text()
    assert '"names": [\n        "reopen"' in flow_snapshot.flow_json()
