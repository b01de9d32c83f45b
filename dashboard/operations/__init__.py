"""The operations engines the console owns: alert rules and their notifications, business rules, the
console snapshot, dead-letter grouping, bulk operations and the Prometheus metrics. They run in the
control process as sweeps the dashboard app registers (``registrations.py``) and never import the
console's pages."""
