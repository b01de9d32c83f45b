"""Alert routes, their owners and contacts (edited by operators, every change audited), silences
and dead-letter reviews (read-only lists; they change through the Routes and Dead letters pages)."""

from __future__ import annotations

from urllib.parse import urlsplit

from django import forms
from django.contrib import admin
from django.core.validators import validate_email
from django.utils.html import format_html

from alerts.models import Contact, Owner, Route, Silence
from dashboard.admin.base import AuditedAdmin, ReadOnlyAdmin
from dashboard.models import DeadLetterReview
from workers.pipeline.http import destination_refusal
from workers.runtime.webhook import url_redacted


def _http_url(value: str) -> str:
    value = (value or "").strip()
    if value:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname or len(value) > 500:
            raise forms.ValidationError("must be an http(s) URL with a host, at most 500 characters")
        refused = destination_refusal(value)
        if refused:
            raise forms.ValidationError(refused)
    return value


class SecretField(forms.CharField):
    """A secret that is never shown: an empty field keeps the stored one, so only a typed one changed."""

    widget = forms.PasswordInput(render_value=False)

    def has_changed(self, initial, data):
        return bool(data)


class RouteForm(forms.ModelForm):
    webhook_url = forms.URLField(required=False, assume_scheme="https", max_length=500)
    alertmanager_url = forms.URLField(
        required=False, assume_scheme="https", max_length=500, help_text="Its base URL, e.g. http://alertmanager:9093"
    )
    webhook_secret = SecretField(
        required=False, max_length=200, help_text="The webhook's signing secret; left empty, the stored one stays."
    )
    emails = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), help_text="E-mail addresses, one per line or comma."
    )

    class Meta:
        model = Route
        fields = (
            "name",
            "owner",
            "webhook_url",
            "webhook_secret",
            "emails",
            "alertmanager_url",
            "ack_page_minutes",
            "ack_ticket_minutes",
            "escalate_to",
            "renotify_minutes",
            "test_every_hours",
            "confirm_within_hours",
            "fallback",
        )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["emails"] = "\n".join(self.instance.emails)

    def clean_webhook_url(self):
        return _http_url(self.cleaned_data["webhook_url"])

    def clean_alertmanager_url(self):
        return _http_url(self.cleaned_data["alertmanager_url"])

    def clean_webhook_secret(self):
        return self.cleaned_data["webhook_secret"] or (self.instance.webhook_secret if self.instance.pk else "")

    def clean_emails(self):
        addresses = [a.strip() for a in self.cleaned_data["emails"].replace(",", "\n").splitlines() if a.strip()]
        for address in addresses:
            try:
                validate_email(address)
            except forms.ValidationError:
                raise forms.ValidationError(f"{address!r} is not an e-mail address") from None
        return addresses

    def clean(self):
        data = super().clean()
        for field in ("escalate_to", "fallback"):
            if data.get(field) is not None and self.instance.pk and data[field].pk == self.instance.pk:
                self.add_error(field, "must be another route")
        if data.get("webhook_url") and not data.get("webhook_secret"):
            self.add_error("webhook_secret", "a webhook needs a signing secret (its receiver checks the signature)")
        return data


@admin.register(Route)
class RouteAdmin(AuditedAdmin):
    form = RouteForm
    list_display = ("name", "owner", "channel_list", "escalation", "renotify_minutes", "test_every_hours")
    list_select_related = ("owner", "escalate_to")

    def get_fields(self, request, obj=None):
        """Who may only look sees where a route sends (scheme and host), never its secret or the
        rest of a URL (a token in a path or query is a credential)."""
        if self.has_change_permission(request, obj):
            return super().get_fields(request, obj)
        shown = {"webhook_url": "webhook", "alertmanager_url": "alertmanager"}
        return [shown.get(name, name) for name in RouteForm.Meta.fields if name != "webhook_secret"]

    def get_readonly_fields(self, request, obj=None):
        if self.has_change_permission(request, obj):
            return ()
        return [name for name in self.get_fields(request, obj)]

    @admin.display(description="webhook")
    def webhook(self, route):
        return url_redacted(route.webhook_url) if route.webhook_url else "—"

    @admin.display(description="Alertmanager")
    def alertmanager(self, route):
        return url_redacted(route.alertmanager_url) if route.alertmanager_url else "—"

    @admin.display(description="channels")
    def channel_list(self, route):
        return ", ".join(route.channels) or "none: nobody is notified"

    @admin.display(description="escalation")
    def escalation(self, route):
        target = route.escalate_to.name if route.escalate_to_id else "the route itself"
        return format_html(
            "page after {} min, ticket after {} min → {}",
            route.ack_page_minutes if route.ack_page_minutes is not None else "—",
            route.ack_ticket_minutes if route.ack_ticket_minutes is not None else "—",
            target,
        )


class ContactInline(admin.TabularInline):
    model = Contact
    extra = 1
    fields = ("name", "role", "email", "phone")


@admin.register(Owner)
class OwnerAdmin(AuditedAdmin):
    list_display = ("name", "description", "contact_list")
    inlines = [ContactInline]

    @admin.display(description="contacts")
    def contact_list(self, owner):
        return ", ".join(contact.name for contact in owner.contacts.all()) or "—"

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("contacts")


@admin.register(Silence)
class SilenceAdmin(ReadOnlyAdmin):
    list_display = ("rule", "scope_shown", "reason", "created_by", "created_at", "ends_at", "lifted")
    list_filter = ("rule",)
    ordering = ("-created_at",)

    @admin.display(description="scope")
    def scope_shown(self, silence):
        return silence.scope or "every scope"

    @admin.display(description="lifted")
    def lifted(self, silence):
        return f"{silence.lifted_at:%Y-%m-%d %H:%M:%S} by {silence.lifted_by}" if silence.lifted_at else "—"


@admin.register(DeadLetterReview)
class DeadLetterReviewAdmin(ReadOnlyAdmin):
    list_display = ("type", "error_class", "step", "decision", "note", "reviewed_by", "reviewed_at", "reopened_at")
    list_filter = ("decision", "type")
    ordering = ("-reviewed_at",)
