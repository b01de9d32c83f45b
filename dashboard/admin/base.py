"""The console's admin building blocks: read-only model pages and inlines; changes go through services."""

from __future__ import annotations

from django.contrib import admin

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
