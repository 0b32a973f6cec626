"""r and ℓ (SPEC §6) per refit run instead of on every battle row: ``Incorporation`` (one
per run that newly counted battles: r, ℓ) and ``IncorporatedBattle`` (battle → run).

The stamps already on the battle rows move here: one Incorporation per distinct (arena,
r, ℓ) of the battles (a run stamps one r on all its battles, and a board served stamps
one ℓ on all of them, so that is one per run as the refit writes them now; rows changed
by hand keep their own pair), its snapshot the arena's newest computed at or before r.
A battle with ℓ and no r cannot arise (ℓ was stamped only on battles with r) and would
lose its ℓ. battles 0022 drops the columns after this."""

import django.db.models.deletion
from django.db import migrations, models

FORWARD = """
INSERT INTO ratings_incorporation (arena_id, snapshot_id, incorporated_at, leaderboard_served_at)
SELECT b.arena_id,
       (SELECT s.id FROM ratings_ratingsnapshot s
         WHERE s.arena_id = b.arena_id AND s.computed_at <= b.incorporated_at
         ORDER BY s.computed_at DESC, s.id DESC LIMIT 1),
       b.incorporated_at, b.leaderboard_served_at
  FROM (SELECT DISTINCT arena_id, incorporated_at, leaderboard_served_at
          FROM battles_battle WHERE incorporated_at IS NOT NULL) AS b
 ORDER BY b.incorporated_at, b.arena_id;

INSERT INTO ratings_incorporatedbattle (battle_id, incorporation_id)
SELECT b.id, i.id
  FROM battles_battle b
  JOIN ratings_incorporation i
    ON i.arena_id = b.arena_id AND i.incorporated_at = b.incorporated_at
   AND i.leaderboard_served_at IS NOT DISTINCT FROM b.leaderboard_served_at
 WHERE b.incorporated_at IS NOT NULL
 ORDER BY b.id;
"""

BACKWARD = """
UPDATE battles_battle b
   SET incorporated_at = i.incorporated_at, leaderboard_served_at = i.leaderboard_served_at
  FROM ratings_incorporatedbattle ib
  JOIN ratings_incorporation i ON i.id = ib.incorporation_id
 WHERE ib.battle_id = b.id;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0001_initial"),
        ("battles", "0020_worker_token"),
        ("ratings", "0005_snapshot_bootstrap_unit"),
    ]

    operations = [
        migrations.CreateModel(
            name="Incorporation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("incorporated_at", models.DateTimeField(help_text="r of SPEC §6.")),
                (
                    "leaderboard_served_at",
                    models.DateTimeField(
                        blank=True,
                        null=True,
                        help_text="ℓ of SPEC §6: the first board served after r.",
                    ),
                ),
                (
                    "arena",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="agents.arena",
                    ),
                ),
                (
                    "snapshot",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="ratings.ratingsnapshot",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("leaderboard_served_at", None)),
                        fields=["arena"],
                        name="incorporation_unserved",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="IncorporatedBattle",
            fields=[
                (
                    "battle",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="incorporation",
                        serialize=False,
                        to="battles.battle",
                    ),
                ),
                (
                    "incorporation",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="battles",
                        to="ratings.incorporation",
                    ),
                ),
            ],
        ),
        migrations.AddField(
            model_name="refitstate",
            name="pending_floor",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(FORWARD, BACKWARD, elidable=False),
    ]
