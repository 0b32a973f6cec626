from django.contrib import admin

from accounts.models import ApiToken, Consent, ConsentTerms, Membership, Team
from accounts.services import user_sockets_recheck


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


# An operator removing memberships (or a whole team) here: the people who lost them
# have their open sockets check their access again at once (accounts.services).


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]

    def save_formset(self, request, form, formset, change) -> None:
        super().save_formset(request, form, formset, change)
        removed = [m.user_id for m in getattr(formset, "deleted_objects", [])]
        user_sockets_recheck(user_ids=removed)

    def delete_model(self, request, obj) -> None:
        members = list(obj.memberships.values_list("user_id", flat=True))
        super().delete_model(request, obj)
        user_sockets_recheck(user_ids=members)

    def delete_queryset(self, request, queryset) -> None:
        members = list(
            Membership.objects.filter(team__in=queryset).values_list("user_id", flat=True)
        )
        super().delete_queryset(request, queryset)
        user_sockets_recheck(user_ids=members)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role", "created_at"]
    list_filter = ["role"]

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        user_sockets_recheck(user_ids=[obj.user_id])

    def delete_queryset(self, request, queryset) -> None:
        members = list(queryset.values_list("user_id", flat=True))
        super().delete_queryset(request, queryset)
        user_sockets_recheck(user_ids=members)


@admin.register(ConsentTerms)
class ConsentTermsAdmin(admin.ModelAdmin):
    list_display = ["version", "published_at"]


@admin.register(Consent)
class ConsentAdmin(admin.ModelAdmin):
    list_display = ["user", "terms", "accepted_at"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["hint", "user", "name", "created_at", "last_used_at", "revoked_at"]
    # The digest is useless to a person and must not be edited.
    exclude = ["digest"]
    readonly_fields = ["hint", "created_at", "last_used_at"]

    def has_add_permission(self, request) -> bool:
        return False  # tokens are created by their owner, shown once
