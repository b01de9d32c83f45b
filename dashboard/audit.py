"""The console's audit log: every action, with actor, target (or filter), reason and result."""

from collections.abc import Callable

from dashboard.models import AuditEntry


def audit_record(*, actor: str, action: str, target: str, reason: str = "", result: str) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor[:255], action=action[:64], target=target[:500], reason=reason[:500], result=result[:500]
    )


def audited(request, *, action: str, target: str, reason: str, apply: Callable[[], str]) -> str:
    """Run one console action on one target and write its audit entry, also when it is refused.

    ``apply`` does the change through a service (which checks the permission) and returns what it
    did; a refusal (an exception) is recorded with its message and raised again for the page.
    """
    actor = f"user:{request.user.get_username()}"
    try:
        result = apply()
    except Exception as refused:
        audit_record(actor=actor, action=action, target=target, reason=reason, result=f"refused: {refused}")
        raise
    audit_record(actor=actor, action=action, target=target, reason=reason, result=result)
    return result
