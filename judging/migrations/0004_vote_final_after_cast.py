# After 0003's data step, in a transaction of its own (PostgreSQL refuses an ALTER TABLE
# on a table with pending trigger events from updated rows).
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("judging", "0003_undo_window_probation_voiding")]

    operations = [
        migrations.AddConstraint(
            model_name="vote",
            constraint=models.CheckConstraint(
                condition=models.Q(("final_at__gte", models.F("voted_at"))),
                name="vote_final_after_cast",
            ),
        ),
    ]
