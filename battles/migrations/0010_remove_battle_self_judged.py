# The data step of 0009 and this schema change run in separate transactions: PostgreSQL
# refuses an ALTER TABLE on a table with pending trigger events from updated rows.
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("battles", "0009_decision_source_screening"),
        ("ratings", "0003_imported_decision_source"),
    ]

    operations = [migrations.RemoveField(model_name="battle", name="self_judged")]
