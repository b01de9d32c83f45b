"""The audit log's one writer: every action a person takes (through the console or on alerts) is
recorded with its actor, target (or filter), reason and result — also when it is refused."""

from jobs.models import AuditEntry


def audit_record(*, actor: str, action: str, target: str, reason: str = "", result: str) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor[:255], action=action[:64], target=target[:500], reason=reason[:500], result=result[:500]
    )
