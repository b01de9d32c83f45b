"""The workers app's models module, as Django looks for it: the runtime's records and the pipeline's,
each defined beside the code that owns them. Import them from there, not from here."""

from workers.pipeline.models import Candidate, Finding, HostState, PageState, ProtectedAsset, RobotsFile, Source
from workers.runtime.models import Pool, ShadowRun, WorkerProcess

__all__ = [
    "Candidate",
    "Finding",
    "HostState",
    "PageState",
    "Pool",
    "ProtectedAsset",
    "RobotsFile",
    "ShadowRun",
    "Source",
    "WorkerProcess",
]
