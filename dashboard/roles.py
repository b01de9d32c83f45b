"""The console's two roles as Django groups: operators act on jobs, reviewers decide cases."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission

OPERATORS = "Operators"
REVIEWERS = "Reviewers"

_VIEW = [f"jobs.view_{model}" for model in ("job", "attempt", "transition", "stalewrite", "effect", "stepevent")] + [
    f"workers.view_{model}" for model in ("pool", "workerprocess", "robotsfile", "hoststate", "source",
                                          "protectedasset", "candidate", "finding")] + [
    f"rechecks.view_{model}" for model in ("recheckplan", "observation")]
ROLE_PERMISSIONS = {
    # Operators also maintain the sources and register protected assets.
    OPERATORS: [*_VIEW, "jobs.operate_job", "workers.add_source", "workers.change_source",
                "workers.add_protectedasset", "rechecks.decide_plan", "rechecks.abort_plan"],
    REVIEWERS: [*_VIEW, "jobs.review_job", "rechecks.decide_plan"],
}


def roles_ensure() -> dict[str, Group]:
    """Create or update the groups with exactly their permissions (idempotent)."""
    groups = {}
    for name, codenames in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=name)
        permissions = []
        for dotted in codenames:
            app_label, codename = dotted.split(".")
            permissions.append(Permission.objects.get(content_type__app_label=app_label, codename=codename))
        group.permissions.set(permissions)
        groups[name] = group
    return groups
