from django.db import migrations


def imported(apps, schema_editor):
    """Battles of a vote import were decided by that import."""
    Battle = apps.get_model("battles", "Battle")
    ImportedBattle = apps.get_model("ratings", "ImportedBattle")
    Battle.objects.filter(
        pk__in=ImportedBattle.objects.values("battle_id"), status="decided"
    ).update(decision_source="import")


class Migration(migrations.Migration):
    dependencies = [
        ("battles", "0009_decision_source_screening"),
        ("ratings", "0002_refit_snapshots_and_vote_imports"),
    ]

    operations = [migrations.RunPython(imported, migrations.RunPython.noop)]
