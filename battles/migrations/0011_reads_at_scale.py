from django.conf import settings
from django.db import migrations, models
from django.db.models import Count, OuterRef, Subquery


def admissible_votes_backfill(apps, schema_editor):
    """Counts every battle's live admissible votes once; from here on
    judging.services.tallies keeps the count."""
    Battle = apps.get_model("battles", "Battle")
    Vote = apps.get_model("judging", "Vote")
    live = Vote.objects.filter(retracted=False, admissible=True)
    counts = live.filter(battle=OuterRef("pk")).order_by().values("battle").annotate(n=Count("pk"))
    Battle.objects.filter(pk__in=live.values("battle")).update(
        admissible_votes=Subquery(counts.values("n"))
    )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("agents", "0004_standing_log"),
        ("battles", "0010_remove_battle_self_judged"),
        ("judging", "0004_vote_final_after_cast"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="battle",
            name="admissible_votes",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(admissible_votes_backfill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="battle",
            index=models.Index(
                condition=models.Q(("status", "judging")),
                fields=["admissible_votes", "ended_at", "id"],
                name="battle_judging_queue",
            ),
        ),
        migrations.AddIndex(
            model_name="battle",
            index=models.Index(
                condition=models.Q(
                    ("exclusion_reason", ""),
                    ("incorporated_at", None),
                    ("status", "decided"),
                    models.Q(("outcome", ""), _negated=True),
                ),
                fields=["arena"],
                name="battle_rated_pending",
            ),
        ),
        migrations.AddIndex(
            model_name="battle",
            index=models.Index(
                condition=models.Q(("decision_source", "submitter"), ("status", "decided")),
                fields=["arena"],
                name="battle_self_judged",
            ),
        ),
        migrations.AddIndex(
            model_name="battle",
            index=models.Index(
                condition=models.Q(("status", "excluded")),
                fields=["arena", "exclusion_reason"],
                name="battle_excluded",
            ),
        ),
    ]
