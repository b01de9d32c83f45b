"""The demo shop's e-mails, sent as Django tasks (here: what would be sent is returned)."""

try:  # Django 6.0 and later
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task


@task
def send_welcome(address: str) -> dict:
    """Welcome a new customer."""
    return {"to": address, "subject": f"Welcome, {address.partition('@')[0]}"}


@task(priority=50)
def send_invoice(order: str, lines: list) -> dict:
    """Send an order's invoice: an order without lines is a wrong input (dead at once)."""
    if not lines:
        raise ValueError(f"order {order} has no lines: nothing to invoice")
    return {"order": order, "total": round(sum(line["price"] * line["quantity"] for line in lines), 2)}
