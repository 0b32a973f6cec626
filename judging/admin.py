from django.contrib import admin

from judging.models import Assignment, JudgeProfile, Vote


@admin.register(JudgeProfile)
class JudgeProfileAdmin(admin.ModelAdmin):
    list_display = ["user", "trust", "is_untrusted"]
    list_filter = ["is_untrusted"]


@admin.register(Assignment)
class AssignmentAdmin(admin.ModelAdmin):
    list_display = ["judge", "battle", "served_at"]


@admin.register(Vote)
class VoteAdmin(admin.ModelAdmin):
    list_display = [
        "judge",
        "battle",
        "choice",
        "admissible",
        "inadmissible_reason",
        "retracted",
        "voted_at",
    ]
    list_filter = ["choice", "admissible", "retracted"]
