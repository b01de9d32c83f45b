"""The flow: the state diagram drawn from the FSM's declaration, every declared transition, and each
job type's expected paths."""

from __future__ import annotations

from dashboard.diagram import declared_edges, state_diagram
from dashboard.pages.common import render, require
from workers.runtime.registry import registry


def flow(request):
    require(request, "jobs.view_job")
    return render(
        request,
        "admin/console/flow.html",
        "The flow: states, transitions and expected paths",
        {"diagram": state_diagram(labels="all"), "edges": declared_edges(), "types": registry.all()},
    )
