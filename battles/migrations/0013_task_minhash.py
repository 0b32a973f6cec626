from django.db import migrations, models


class Migration(migrations.Migration):
    """The near-duplicate check's MinHash signature on each task, written at admission.
    Existing tasks keep null: the check reads their instructions instead."""

    dependencies = [
        ("battles", "0012_worker_faults"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="minhash",
            field=models.BinaryField(
                help_text="MinHash signature of the instruction (48 little-endian uint32).",
                null=True,
            ),
        ),
    ]
