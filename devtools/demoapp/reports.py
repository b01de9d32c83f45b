"""The demo shop's monthly report, a Django task whose first attempt meets a partner that is down."""

try:  # Django 6.0 and later
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task


@task(priority=-50, takes_context=True)
def monthly_report(context, month: str) -> dict:
    """Build a month's report; the warehouse answers only from the second attempt on."""
    if context.attempt < 2:
        raise ConnectionError(f"attempt {context.attempt}: the warehouse does not answer")
    return {"month": month, "attempt": context.attempt, "orders": 42}
