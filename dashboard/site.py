"""The console: Django's admin site with a home in three views, mounting the console's own pages
(``dashboard/pages/``, one module each). Every page needs a staff login; every action checks the
person's permission in the service it calls and is written to the audit log."""

from __future__ import annotations

from django.contrib import admin
from django.template.response import TemplateResponse
from django.urls import path

from dashboard.pages import (
    bulk,
    deadletters,
    flow,
    flowkeys,
    paths,
    pools,
    routes,
    rules,
    runbook,
    stuck,
    trends,
    workspace,
)
from dashboard.selectors import home_context


class ConsoleSite(admin.AdminSite):
    site_header = "Leitstand"
    site_url = None  # no public site to "view": the console is the site
    site_title = "Leitstand"
    index_title = "Operations console"
    index_template = "admin/console_home.html"
    # The navigation bar and the home's list of records replace the model sidebar, which took a
    # quarter of a 1,280-px screen from every list (the alerts' diagnoses were cut off).
    enable_nav_sidebar = False

    def get_urls(self):
        pages = [
            ("review/", workspace.review_queue, "review_queue"),
            ("review/next/", workspace.review_next, "review_next"),
            ("review/<uuid:job_id>/", workspace.review_case, "review_case"),
            ("stuck/", stuck.stuck_leases, "stuck_leases"),
            ("bulk/", bulk.bulk, "bulk"),
            ("runbooks/<slug:rule>/", runbook.runbook, "runbook"),
            ("paths/", paths.paths, "paths"),
            ("flow/", flow.flow, "flow"),
            ("rules/", rules.business_rules, "business_rules"),
            ("deadletters/", deadletters.dead_letters, "dead_letters"),
            ("pools/<slug:pool>/act/", pools.pool_act, "pool_act"),
            ("pools/<slug:pool>/keys/", flowkeys.flow_keys, "flow_keys"),
            ("trends/", trends.trends, "trends"),
            ("routes/", routes.routes_page, "alert_routes"),
            ("routes/confirm/", routes.receipt_confirm_page, "receipt_confirm"),
        ]
        return [path(route, self.admin_view(view), name=name) for route, view, name in pages] + super().get_urls()

    def index(self, request, extra_context=None):
        if request.htmx:  # the live part alone (templates/admin/console/home_live.html)
            context = {**self.each_context(request), **home_context(), "live_refresh": True}
            return TemplateResponse(request, "admin/console/home_live.html", context)
        return super().index(request, {**home_context(), **(extra_context or {})})
