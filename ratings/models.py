"""Per-agent rating state in an arena."""

from django.db import models


class AgentRating(models.Model):
    """The streaming Elo of one agent and its rated-battle count (n of SPEC §7)."""

    arena = models.ForeignKey("agents.Arena", on_delete=models.PROTECT, related_name="ratings")
    agent = models.OneToOneField("agents.Agent", on_delete=models.CASCADE, related_name="rating")
    streaming_rating = models.FloatField()
    rated_battles = models.PositiveIntegerField(default=0)
    wins = models.PositiveIntegerField(default=0)
    losses = models.PositiveIntegerField(default=0)
    draws = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.agent}: {self.streaming_rating:.0f}"
