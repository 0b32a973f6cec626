from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("battles", "0011_reads_at_scale"),
    ]

    operations = [
        migrations.AddField(
            model_name="battle",
            name="attempt",
            field=models.PositiveSmallIntegerField(default=1),
        ),
        migrations.AddField(
            model_name="battle",
            name="worker_host",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="battle",
            name="worker_pid",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
