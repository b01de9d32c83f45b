"""The console's audit log: every action, with actor, target (or filter), reason and result."""

from collections.abc import Callable

from django.core.exceptions import PermissionDenied

from dashboard.models import AuditEntry


def audit_record(*, actor: str, action: str, target: str, reason: str = "", result: str) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor[:255], action=action[:64], target=target[:500], reason=reason[:500], result=result[:500]
    )


def audited(request, *, action: str, target: str, reason: str, permission: str, apply: Callable[[], str]) -> str:
    """The one way a console action acts on one target: check the person's ``permission``, apply the
    change, write the audit entry — also when it is refused.

    ``apply`` does the change through the owning app's service (which checks the permission again)
    and returns what it did; a refusal (an exception) is recorded with its message and raised again
    for the page.
    """
    actor = f"user:{request.user.get_username()}"
    try:
        if not request.user.has_perm(permission):
            raise PermissionDenied(f"{request.user.get_username()} may not {action} ({permission} is required)")
        result = apply()
    except Exception as refused:
        audit_record(actor=actor, action=action, target=target, reason=reason, result=f"refused: {refused}")
        raise
    audit_record(actor=actor, action=action, target=target, reason=reason, result=result)
    return result
