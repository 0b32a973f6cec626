"""ratings 0006 and battles 0022 move r and ℓ (SPEC §6) off the battle rows onto refit
runs, and back when reversed."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from agents.models import Arena
from ratings.models import Incorporation, RatingSnapshot
from tests.ratings.factories import decided_battle
from tests.ratings.stamps import stamps_of

BEFORE = [("battles", "0021_decide_due"), ("ratings", "0005_snapshot_bootstrap_unit")]
AFTER = [("battles", "0022_stamps_per_refit_run"), ("ratings", "0006_incorporations")]


def migrate(targets) -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def on_rows(sql: str, params=()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


@pytest.mark.django_db(transaction=True)
def test_the_stamps_move_to_one_run_per_arena_r_and_l_and_back(alice, roster):
    # Given battles stamped on their rows before the migration: two by a run served
    # since, one by a later run not served yet, one in no refit
    agents = list(roster)
    t1 = timezone.now() - timedelta(hours=2)
    t2, t3 = t1 + timedelta(seconds=3), t1 + timedelta(hours=1)
    battles = [
        decided_battle(submitter=alice, a=agents[0], b=agents[1], outcome="A") for _ in range(4)
    ]
    arena = Arena.objects.public()
    snapshot = RatingSnapshot.objects.create(
        arena=arena, computed_at=t1, compute_ms=1, battles=2, digest="d", ridge=0.0,
        bootstrap_replicates=0, seed=1, min_battles=1, iterations=1, converged=True,
        robust_published=False,
    )  # fmt: skip
    migrate(BEFORE)
    try:
        for battle, r, ell in zip(battles, (t1, t1, t3), (t2, t2, None), strict=False):
            on_rows(
                "UPDATE battles_battle SET incorporated_at = %s, leaderboard_served_at = %s"
                " WHERE id = %s",
                [r, ell, battle.pk],
            )
        # When the migrations run
        migrate(AFTER)
        # Then each distinct (arena, r, ℓ) is one run, its snapshot the newest at or
        # before its r, and every battle reads the stamps it had
        runs = list(Incorporation.objects.order_by("incorporated_at"))
        assert [(run.incorporated_at, run.leaderboard_served_at) for run in runs] == [
            (t1, t2),
            (t3, None),
        ]
        assert {run.snapshot_id for run in runs} == {snapshot.pk}
        assert stamps_of(battles) == {
            battles[0].pk: (t1, t2),
            battles[1].pk: (t1, t2),
            battles[2].pk: (t3, None),
            battles[3].pk: (None, None),
        }
        # and the battle table has neither column nor their indexes any more
        columns = {c.name for c in connection.introspection.get_table_description(
            connection.cursor(), "battles_battle")}  # fmt: skip
        assert not {"incorporated_at", "leaderboard_served_at"} & columns
        # When reversed, the rows get their stamps back
        migrate(BEFORE)
        back = dict(
            (pk, (r, ell))
            for pk, r, ell in on_rows(
                "SELECT id, incorporated_at, leaderboard_served_at FROM battles_battle"
                " WHERE id = ANY(%s)",
                [[b.pk for b in battles]],
            )
        )
        assert back == {
            battles[0].pk: (t1, t2),
            battles[1].pk: (t1, t2),
            battles[2].pk: (t3, None),
            battles[3].pk: (None, None),
        }
    finally:
        executor = MigrationExecutor(connection)
        migrate(executor.loader.graph.leaf_nodes())
