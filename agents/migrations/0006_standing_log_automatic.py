import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    """The arena itself writes standing-log entries (an automatic pause after failed
    lanes): those have no actor."""

    dependencies = [
        ("agents", "0005_entry_lifecycle"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="agentstandinglogentry",
            name="actor",
            field=models.ForeignKey(
                blank=True,
                help_text="Empty: the arena itself (an automatic pause after failed lanes).",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
    ]
