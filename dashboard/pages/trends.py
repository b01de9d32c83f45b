"""The trend charts' series (the home's charts) as JSON."""

from __future__ import annotations

from django.http import JsonResponse

from dashboard.operations.trends import trend_series
from dashboard.pages.common import require


def trends(request):
    """``?type=<job type>`` (default all) ``&range=1h|24h|7d``."""
    require(request, "jobs.view_job")
    try:
        series = trend_series(job_type=request.GET.get("type", ""), span=request.GET.get("range", "1h"))
    except ValueError as refused:
        return JsonResponse({"error": str(refused)}, status=400)
    return JsonResponse(series)
