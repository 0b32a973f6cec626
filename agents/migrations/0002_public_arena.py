from django.db import migrations


def create_public_arena(apps, schema_editor):
    Arena = apps.get_model("agents", "Arena")
    Arena.objects.get_or_create(slug="public", defaults={"name": "Public arena"})


class Migration(migrations.Migration):
    dependencies = [("agents", "0001_initial")]

    operations = [migrations.RunPython(create_public_arena, migrations.RunPython.noop)]
