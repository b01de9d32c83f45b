"""Enqueue the demo app's Django tasks (devtools/demoapp): welcomes, an invoice, an invoice for an
order without lines (dead: a wrong input) and a monthly report that succeeds at its second attempt —
run by the ``tasks`` pool, which imports their modules when it first meets them."""

from django.core.management.base import BaseCommand
from django.db import transaction

from devtools.demoapp import emails, reports


class Command(BaseCommand):
    help = "Enqueue the demo app's Django tasks (run by the tasks pool)."

    def handle(self, *args, **options):
        with transaction.atomic():
            results = [
                emails.send_welcome.enqueue("ada@shop.example"),
                emails.send_welcome.enqueue("grace@shop.example"),
                emails.send_invoice.enqueue("A-1001", [{"price": 19.9, "quantity": 2}, {"price": 5.0, "quantity": 1}]),
                emails.send_invoice.enqueue("A-1002", []),
                reports.monthly_report.enqueue("2026-11"),
            ]
        for result in results:
            self.stdout.write(f"{result.task.module_path}: {result.id}")
