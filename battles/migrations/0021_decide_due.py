"""Battles being judged carry when their resolution is next due (judging.decider)."""

from django.db import migrations, models
from django.utils import timezone


def due_now(apps, schema_editor):
    """Every battle open for judging is looked at once by the decider, which then sets
    its real due time (the next undo window's end, or JUDGING_TTL)."""
    Battle = apps.get_model("battles", "Battle")
    Battle.objects.filter(status="judging").update(decide_due_at=timezone.now())


class Migration(migrations.Migration):
    dependencies = [("battles", "0020_worker_token")]

    operations = [
        migrations.AddField(
            model_name="battle",
            name="decide_due_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddIndex(
            model_name="battle",
            index=models.Index(
                condition=models.Q(("status", "judging")),
                fields=["decide_due_at", "id"],
                name="battle_decide_due",
            ),
        ),
        migrations.RunPython(due_now, migrations.RunPython.noop, elidable=True),
    ]
