"""The console's audit log: every action, with actor, target (or filter), reason and result."""

from dashboard.models import AuditEntry


def audit_record(*, actor: str, action: str, target: str, reason: str = "", result: str) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor[:255], action=action[:64], target=target[:500], reason=reason[:500], result=result[:500]
    )
