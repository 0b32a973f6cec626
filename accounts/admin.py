from django.contrib import admin
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model

from accounts.models import ApiToken, Consent, ConsentTerms, Membership, Team
from accounts.services import api_tokens_forget, user_sockets_recheck, user_tokens_forget


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

    # Any change (a revocation, another owner) or deletion ends the cached entry of the
    # token for every web process first (accounts.token_cache).

    def save_model(self, request, obj, form, change) -> None:
        if change:
            api_tokens_forget(digests=[obj.digest])
        super().save_model(request, obj, form, change)

    def delete_model(self, request, obj) -> None:
        api_tokens_forget(digests=[obj.digest])
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        api_tokens_forget(digests=list(queryset.values_list("digest", flat=True)))
        super().delete_queryset(request, queryset)


User = get_user_model()
admin.site.unregister(User)


@admin.register(User)
class UserAdmin(auth_admin.UserAdmin):
    """Django's user admin; deactivating, changing or deleting a user ends the cached
    entries of their API tokens for every web process first (accounts.token_cache)."""

    def save_model(self, request, obj, form, change) -> None:
        if change:
            user_tokens_forget(user_ids=[obj.pk])
        super().save_model(request, obj, form, change)

    def delete_model(self, request, obj) -> None:
        user_tokens_forget(user_ids=[obj.pk])
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset) -> None:
        user_tokens_forget(user_ids=list(queryset.values_list("pk", flat=True)))
        super().delete_queryset(request, queryset)
