"""The console's actions, audited: a person's permission checked, the change applied through its
app's service, and the audit log written (``jobs.audit``) — also when it is refused."""

from collections.abc import Callable

from django.core.exceptions import PermissionDenied

from jobs.audit import audit_record


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
