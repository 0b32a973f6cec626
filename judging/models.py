"""Judges, what they were served, and their votes."""

from django.conf import settings
from django.db import models
from django.db.models import Q


class JudgeProfile(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="judge_profile"
    )
    trust = models.FloatField(default=0.5, help_text="ω of SPEC §5.4, in [0.1, 1].")
    is_untrusted = models.BooleanField(default=False, help_text="Votes become inadmissible.")

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(trust__gte=0.1) & Q(trust__lte=1.0), name="judgeprofile_trust_range"
            )
        ]

    def __str__(self) -> str:
        return f"Judge {self.user}"


class Assignment(models.Model):
    """A battle served to a judge. ``served_at`` (server clock) starts the reading time."""

    judge = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assignments"
    )
    battle = models.ForeignKey(
        "battles.Battle", on_delete=models.CASCADE, related_name="assignments"
    )
    served_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["judge", "battle"], name="assignment_unique_judge_battle"
            )
        ]

    def __str__(self) -> str:
        return f"battle {self.battle_id} served to {self.judge}"


class Vote(models.Model):
    class Choice(models.TextChoices):
        A = "A", "A is better"
        B = "B", "B is better"
        TIE = "tie", "Tie"
        BOTH_BAD = "both_bad", "Both are bad"
        ABSTAIN = "abstain", "Abstain"

    judge = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="votes"
    )
    battle = models.ForeignKey("battles.Battle", on_delete=models.PROTECT, related_name="votes")
    choice = models.CharField(max_length=10, choices=Choice.choices)
    served_at = models.DateTimeField()
    voted_at = models.DateTimeField()
    retracted = models.BooleanField(default=False)
    is_submitter = models.BooleanField(default=False)
    admissible = models.BooleanField()
    inadmissible_reason = models.CharField(max_length=40, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["judge", "battle"],
                condition=Q(retracted=False),
                name="vote_one_live_per_judge_battle",
            ),
            models.CheckConstraint(
                condition=Q(voted_at__gte=models.F("served_at")), name="vote_after_served"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.judge} on battle {self.battle_id}: {self.choice}"
