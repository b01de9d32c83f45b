"""The console's three roles as Django groups, created by a data migration and kept exact by
``roles_ensure`` (run again by ``manage.py demo_data``):

| role | sees | may |
| --- | --- | --- |
| ``viewer`` | every console page, read-only | nothing |
| ``reviewer`` | everything | decide, escalate and skip review cases; end a recheck plan with a manual decision |
| ``senior reviewer`` | everything | as a reviewer, and decide escalated cases (never one they escalated) |
| ``operator`` | everything | retry, cancel, confirm, release, send to review, bulk actions, pause/resume pools; maintain sources and assets; end or abort recheck plans; create API clients and tokens, rotate and revoke them; edit alert routes, owners and contacts, send route tests, silence alerts, review dead-letter groups |

The matrix is enforced by the services each action calls (the person's permission) and by the
console views; ``tests/console/test_permissions.py`` checks every console URL and action × role.
"""

from __future__ import annotations

OPERATORS = "operator"
REVIEWERS = "reviewer"
SENIOR_REVIEWERS = "senior reviewer"
VIEWERS = "viewer"

_VIEW = (
    [
        f"jobs.view_{model}"
        for model in ("job", "attempt", "transition", "stalewrite", "effect", "stepevent", "batch", "client")
    ]
    + [
        f"workers.view_{model}"
        for model in (
            "pool",
            "workerprocess",
            "robotsfile",
            "hoststate",
            "source",
            "protectedasset",
            "candidate",
            "finding",
        )
    ]
    + [f"rechecks.view_{model}" for model in ("recheckplan", "observation")]
    + ["jobs.view_auditentry"]
    + [
        f"alerts.view_{model}"
        for model in ("alert", "alertevent", "route", "owner", "contact", "receipttest", "silence")
    ]
    + [f"dashboard.view_{model}" for model in ("bulkoperation", "deadletterreview")]
)
ROLE_PERMISSIONS = {
    VIEWERS: _VIEW,
    REVIEWERS: [*_VIEW, "jobs.review_job", "rechecks.decide_plan"],
    # Also decides the escalated queue (never a case they escalated themselves).
    SENIOR_REVIEWERS: [*_VIEW, "jobs.review_job", "jobs.review_escalated_job", "rechecks.decide_plan"],
    OPERATORS: [
        *_VIEW,
        "jobs.operate_job",
        "jobs.manage_client",
        "workers.add_source",
        "workers.change_source",
        "workers.add_protectedasset",
        "rechecks.decide_plan",
        "rechecks.abort_plan",
        # Alert routes, their owners and contacts are edited in the console (audited).
        *(f"alerts.{action}_{model}" for action in ("add", "change") for model in ("route", "owner", "contact")),
        "alerts.delete_contact",
    ],
}


def roles_ensure(apps=None, *, missing_ok: bool = False) -> dict:
    """Create or update the groups with exactly their permissions (idempotent). ``apps``: a
    migration's app registry; ``missing_ok``: skip permissions of models a later migration creates
    (that migration runs this again)."""
    if apps is None:
        from django.apps import apps
    group_model, permission_model = apps.get_model("auth", "Group"), apps.get_model("auth", "Permission")
    groups = {}
    for name, codenames in ROLE_PERMISSIONS.items():
        group, _ = group_model.objects.get_or_create(name=name)
        permissions = []
        for dotted in codenames:
            app_label, codename = dotted.split(".")
            found = permission_model.objects.filter(content_type__app_label=app_label, codename=codename).first()
            if found is None and not missing_ok:
                raise LookupError(f"permission {dotted} does not exist")
            if found is not None:
                permissions.append(found)
        group.permissions.set(permissions)
        groups[name] = group
    return groups


def roles_migrate(apps, schema_editor) -> None:
    """For data migrations: create the permissions the roles need (normally made only after all
    migrations ran), then the groups. A migration that adds a model the roles see calls it again."""
    from django.contrib.auth.management import create_permissions

    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    roles_ensure(apps, missing_ok=True)
