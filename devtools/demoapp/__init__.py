"""The demo's own Django tasks, as a team's app would have them: importable, not in
``INSTALLED_APPS``, outside any ``tasks`` module — the demo's ``tasks`` pool meets them by the module
path their jobs carry (``manage.py demo_tasks`` enqueues a few; docs/operations.md, "Django tasks")."""
