from django.contrib import admin

from accounts.models import ApiToken, Consent, ConsentTerms, Membership, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [MembershipInline]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role", "created_at"]
    list_filter = ["role"]


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
