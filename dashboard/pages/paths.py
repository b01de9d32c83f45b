"""The Paths page of one job type: its expected paths and the paths its jobs took."""

from __future__ import annotations

from django.http import Http404

from dashboard.pages.common import render, require
from dashboard.paths import type_paths
from workers.runtime.registry import registry


def paths(request):
    require(request, "jobs.view_job")
    types = registry.all()
    chosen = request.GET.get("type") or "crawl"
    job_type = next((t for t in types if t.name == chosen), None)
    if job_type is None:
        raise Http404(f"no job type {chosen!r}")
    return render(
        request,
        "admin/console/paths.html",
        f"Paths of {job_type.name}",
        {"types": types, "job_type": job_type, "paths": type_paths(job_type)},
    )
