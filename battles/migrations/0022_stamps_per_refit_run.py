"""r and ℓ leave the battle row for ratings.Incorporation (ratings 0006 moved them):
the two columns go, with the two partial indexes whose predicates named them (an update
of either stamp was never HOT and wrote a new entry into most of the table's indexes).
battle_rated_recent takes battle_rated_pending's place for the board's pending figures:
the rated battles by decision time (ratings.selectors.refit_status reads those decided
since the last refit's read, RefitState.pending_floor)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("battles", "0021_decide_due"),
        ("ratings", "0006_incorporations"),
    ]

    operations = [
        migrations.RemoveIndex(model_name="battle", name="battle_awaiting_service"),
        migrations.RemoveIndex(model_name="battle", name="battle_rated_pending"),
        migrations.AddIndex(
            model_name="battle",
            index=models.Index(
                condition=models.Q(
                    ("exclusion_reason", ""),
                    ("status", "decided"),
                    models.Q(("outcome", ""), _negated=True),
                ),
                fields=["arena", "decided_at"],
                name="battle_rated_recent",
            ),
        ),
        migrations.RemoveField(model_name="battle", name="incorporated_at"),
        migrations.RemoveField(model_name="battle", name="leaderboard_served_at"),
    ]
