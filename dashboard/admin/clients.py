"""The API's clients and their tokens: list them; create a token (for a new or an existing client),
rotate and revoke tokens, give a client its own webhook. Every change is audited; a new token or
webhook secret is shown once, on the answer to the form that made it, and never again."""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse

from api import options as api_options
from api.clients import client_webhook_set
from api.models import ApiToken
from api.tokens import SCOPES, token_create, token_revoke, token_rotate
from dashboard.admin.base import ReadOnlyAdmin
from dashboard.audit import audited
from dashboard.display import as_id
from jobs.clients import client_lanes_set, client_open_jobs_set, client_trace_trust_set
from jobs.models import MANAGE_CLIENTS_PERMISSION, Client
from jobs.services import JobInputError
from workers.runtime.webhook import url_redacted


class WebhookFilter(admin.SimpleListFilter):
    """Where a client's events go: which clients use the global webhook is what an operator checks
    after an upgrade or before changing the global receiver."""

    title = "webhook"
    parameter_name = "webhook"
    CHOICES = {
        "own": ("its own", ~Q(webhook_url="")),
        "global": ("the global webhook", Q(webhook_url="", uses_global_webhook=True)),
        "none": ("none", Q(webhook_url="", uses_global_webhook=False)),
    }

    def lookups(self, request, model_admin):
        return [(value, label) for value, (label, _) in self.CHOICES.items()]

    def queryset(self, request, queryset):
        chosen = self.CHOICES.get(self.value())
        return queryset.filter(chosen[1]) if chosen else queryset


@admin.register(Client)
class ClientAdmin(ReadOnlyAdmin):
    list_display = ("name", "live_tokens", "webhook", "lanes", "created_at", "created_by")
    list_filter = (WebhookFilter,)
    search_fields = ("name",)
    ordering = ("name",)
    change_list_template = "admin/jobs/client/console_change_list.html"
    change_form_template = "admin/jobs/client/console_change_form.html"
    fields = ("name", "webhook", "lanes", "trace_context", "created_at", "created_by")
    readonly_fields = fields

    class Media:
        css = {"all": ["dashboard/console.css"]}

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(live=Count("tokens", filter=Q(tokens__revoked_at__isnull=True)))

    @admin.display(description="live tokens", ordering="live")
    def live_tokens(self, client):
        return client.live

    @admin.display(description="webhook")
    def webhook(self, client):
        """Scheme and host only: the path or query of a receiver may carry credentials."""
        if client.webhook_url:
            return url_redacted(client.webhook_url)
        return "the global webhook" if client.uses_global_webhook else "none (its events are not sent)"

    @admin.display(description="lanes")
    def lanes(self, client):
        return f"{client.most_urgent_lane}–9"

    @admin.display(description="trace context")
    def trace_context(self, client):
        return "trusted: joined" if client.trace_trusted else "not trusted: a new trace, linked"

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("new-token/", view(self.token_new), name="jobs_client_token_new"),
            path("<int:client_id>/act/", view(self.act), name="jobs_client_act"),
            *super().get_urls(),
        ]

    def _context(self, request, **extra):
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "scopes": SCOPES,
            "can_manage": request.user.has_perm(MANAGE_CLIENTS_PERMISSION),
            "default_open_jobs": api_options.current().client_open_jobs or "no bound",
            **extra,
        }

    def changelist_view(self, request, extra_context=None):
        return super().changelist_view(request, {**(extra_context or {}), **self._context(request)})

    def change_view(self, request, object_id, form_url="", extra_context=None):
        if not (str(object_id).isascii() and str(object_id).isdigit()):
            raise Http404(f"no client {object_id[:40]!r}")
        tokens = ApiToken.objects.filter(client_id=object_id).order_by("revoked_at", "name")
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), **self._context(request, tokens=tokens)}
        )

    def token_new(self, request):
        """A token for a new or an existing client (``create_api_token --client``)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return TemplateResponse(
                request,
                "admin/jobs/client/token_new.html",
                self._context(request, title="New API token", client_name=request.GET.get("client", "")),
            )
        client = request.POST.get("client", "").strip()
        return self._token_create(request, client, HttpResponseRedirect(reverse("admin:jobs_client_token_new")))

    def act(self, request, client_id):
        """POST only: ``action`` is token_create, token_rotate, token_revoke or webhook_set."""
        client = get_object_or_404(Client, pk=client_id)
        back = HttpResponseRedirect(reverse("admin:jobs_client_change", args=[client.pk]))
        if request.method != "POST":
            return back
        action, token_name = request.POST.get("action"), request.POST.get("token", "")
        reason = request.POST.get("reason", "").strip() or "from the console"
        if action == "token_create":
            return self._token_create(request, client.name, back)
        if action in ("token_rotate", "token_revoke"):
            if not ApiToken.objects.filter(client=client, name=token_name).exists():
                messages.error(request, f"client {client.name} has no token {token_name!r}")
                return back
            if action == "token_revoke":
                return self._apply(
                    request,
                    back,
                    action="api_token.revoke",
                    target=f"token {token_name} of client {client.name}",
                    reason=reason,
                    apply=lambda: f"revoked {token_revoke(name=token_name, user=request.user).prefix}…",
                )
            return self._apply(
                request,
                back,
                action="api_token.rotate",
                target=f"token {token_name} of client {client.name}",
                reason=reason,
                apply=lambda: token_rotate(name=token_name, user=request.user),
                secret_of=lambda rotated: (f"token {rotated[0].name}", rotated[1]),
                result=lambda rotated: f"new secret, prefix {rotated[0].prefix}…",
            )
        if action == "open_jobs_set":
            text = request.POST.get("max_open_jobs", "").strip()
            bound = as_id(text) if text else None
            if text and bound is None:
                messages.error(request, "max_open_jobs: must be a whole number, or empty for the default")
                return back
            return self._apply(
                request,
                back,
                action="api_client.open_jobs",
                target=f"client {client.name}",
                reason=reason,
                apply=lambda: client_open_jobs_set(
                    client_id=client.pk, bound=bound, actor=f"user:{request.user.get_username()}", user=request.user
                ),
                result=lambda changed: f"open jobs bound {changed.max_open_jobs or 'default'}",
            )
        if action == "webhook_set":
            url = request.POST.get("webhook_url", "")
            return self._apply(
                request,
                back,
                action="api_client.webhook",
                target=f"client {client.name}",
                reason=reason,
                apply=lambda: client_webhook_set(
                    client_id=client.pk, url=url, actor=f"user:{request.user.get_username()}", user=request.user
                ),
                secret_of=lambda changed: (f"the webhook of client {client.name}", changed[1]) if changed[1] else None,
                result=lambda changed: f"webhook {self.webhook(changed[0])}",
            )
        if action == "lanes_set":
            lane = as_id(request.POST.get("most_urgent_lane", "").strip())
            if lane is None or lane > 9:
                messages.error(request, "most_urgent_lane: must be a lane from 0 (the most urgent) to 9")
                return back
            return self._apply(
                request,
                back,
                action="api_client.lanes",
                target=f"client {client.name}",
                reason=reason,
                apply=lambda: client_lanes_set(client_id=client.pk, most_urgent_lane=lane, user=request.user),
                result=lambda changed: f"lanes {self.lanes(changed)}",
            )
        if action == "trace_trust_set" and request.POST.get("trusted") in ("yes", "no"):
            trusted = request.POST["trusted"] == "yes"
            return self._apply(
                request,
                back,
                action="api_client.trace_trust",
                target=f"client {client.name}",
                reason=reason,
                apply=lambda: client_trace_trust_set(client_id=client.pk, trusted=trusted, user=request.user),
                result=lambda changed: f"trace context {self.trace_context(changed)}",
            )
        messages.error(request, f"unknown action {action!r}")
        return back

    def _token_create(self, request, client: str, back):
        name = request.POST.get("name", "").strip()
        try:
            expires = float(request.POST["expires_days"]) if request.POST.get("expires_days") else None
        except ValueError:
            messages.error(request, "expires_days: must be a number of days")
            return back
        scopes = request.POST.getlist("scopes")
        return self._apply(
            request,
            back,
            action="api_token.create",
            target=f"token {name} of client {client}",
            reason=f"scopes {', '.join(scopes)}" + (f", expires in {expires:g} days" if expires else ""),
            apply=lambda: token_create(
                name=name,
                client=client,
                scopes=scopes,
                expires_days=expires,
                actor=f"user:{request.user.get_username()}",
                user=request.user,
            ),
            secret_of=lambda created: (f"token {created[0].name} of client {created[0].client.name}", created[1]),
            result=lambda created: f"created, prefix {created[0].prefix}…",
        )

    def _apply(self, request, back, *, action, target, reason, apply, secret_of=None, result=None):
        """Run ``apply`` through the audited path; show a new secret once (never stored, never cached)."""
        outcome = {}

        def audited_apply():
            outcome["value"] = apply()
            return result(outcome["value"]) if result else outcome["value"]

        try:
            done = audited(
                request,
                action=action,
                target=target,
                reason=reason,
                permission=MANAGE_CLIENTS_PERMISSION,
                apply=audited_apply,
            )
        except (JobInputError, PermissionDenied) as refused:
            messages.error(request, str(refused))
            return back
        shown = secret_of(outcome["value"]) if secret_of else None
        if shown is None:
            messages.success(request, f"{target}: {done}.")
            return back
        what, secret = shown
        response = TemplateResponse(
            request,
            "admin/jobs/client/secret.html",
            self._context(request, title=f"The secret of {what}", what=what, secret=secret, back=back.url),
        )
        response["Cache-Control"] = "no-store"
        return response
