"""The console's admin building blocks: read-only model pages and inlines, and pages whose every saved
change is audited; changes go through services."""

from __future__ import annotations

from django.contrib import admin

from jobs.audit import audit_record

# The lookups a list filter on a field puts into the query string (choices, booleans, relations, dates).
_FIELD_FILTER_LOOKUPS = ("exact", "isnull", "id__exact", "gte", "lt")


class OfferedLookupsOnly:
    """A list page filters only by what it offers: its list filters, and ``extra_lookups`` (the lookups
    the console's own links use). Any other (``?payload__icontains=``, ``?error_message__iregex=``) is
    refused with 400 — on millions of rows it would be an unindexed scan anyone with a login can start."""

    extra_lookups: tuple[str, ...] = ()

    def lookup_allowed(self, lookup, value, request=None):
        if lookup in self.extra_lookups:
            return True
        for item in self.get_list_filter(request):
            if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
                if lookup == item.parameter_name:
                    return True
                continue
            name = item[0] if isinstance(item, tuple) else item
            if lookup in {f"{name}__{suffix}" for suffix in _FIELD_FILTER_LOOKUPS}:
                return True
        return False


class ReadOnlyAdmin(OfferedLookupsOnly, admin.ModelAdmin):
    # No exact COUNT(*) over big tables on page load.
    show_full_result_count = False

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


class AuditedAdmin(OfferedLookupsOnly, admin.ModelAdmin):
    """Every saved change is an audit entry naming the fields that changed (never a secret's value)."""

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        audit_record(
            actor=f"user:{request.user.get_username()}",
            action=f"{obj._meta.model_name}.{'changed' if change else 'created'}",
            target=f"{obj._meta.verbose_name} {obj}",
            reason=", ".join(form.changed_data),
            result="saved",
        )

    def delete_model(self, request, obj):
        audit_record(
            actor=f"user:{request.user.get_username()}",
            action=f"{obj._meta.model_name}.deleted",
            target=f"{obj._meta.verbose_name} {obj}",
            result="deleted",
        )
        super().delete_model(request, obj)

    def save_formset(self, request, form, formset, change):
        super().save_formset(request, form, formset, change)
        for changed in [*formset.new_objects, *(obj for obj, _ in formset.changed_objects)]:
            audit_record(
                actor=f"user:{request.user.get_username()}",
                action=f"{changed._meta.model_name}.saved",
                target=f"{changed._meta.verbose_name} {changed}",
                result="saved",
            )
        for deleted in formset.deleted_objects:
            audit_record(
                actor=f"user:{request.user.get_username()}",
                action=f"{deleted._meta.model_name}.deleted",
                target=f"{deleted._meta.verbose_name} {deleted}",
                result="deleted",
            )

    def has_delete_permission(self, request, obj=None):
        return False  # a route or team that alerts name stays; rename or re-own it instead
