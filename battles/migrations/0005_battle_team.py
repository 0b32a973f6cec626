import django.db.models.deletion
from django.db import migrations, models


def copy_team_from_task(apps, schema_editor):
    Battle = apps.get_model("battles", "Battle")
    Task = apps.get_model("battles", "Task")
    for task_id, team_id in Task.objects.values_list("id", "team_id"):
        Battle.objects.filter(task_id=task_id).update(team_id=team_id)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0001_initial"),
        ("agents", "0003_roster_fields"),
        ("battles", "0004_heartbeat_end_request"),
    ]

    operations = [
        migrations.AddField(
            model_name="battle",
            name="team",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="battles",
                to="accounts.team",
            ),
        ),
        migrations.RunPython(copy_team_from_task, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="battle",
            name="team",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="battles",
                to="accounts.team",
            ),
        ),
        migrations.AddIndex(
            model_name="battle",
            index=models.Index(
                condition=models.Q(("status", "queued")),
                fields=["arena", "team"],
                name="battle_queued",
            ),
        ),
    ]
