"""What every app's admin shares: a model admin that shows rows and never changes them
(evidence, rating state, audit logs). Rows of such models change only through the
services that own them."""

from django.contrib import admin


class ReadOnlyAdmin(admin.ModelAdmin):
    """May look; may not add, edit or delete."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
