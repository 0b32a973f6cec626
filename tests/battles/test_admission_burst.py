"""A burst of 1,000 parallel submissions at the queue bound, on PostgreSQL with real
transactions: the bound holds exactly, and nothing is half-created."""

import random
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from arena_site.exceptions import ApplicationError
from battles.models import Battle, Run, Task
from battles.services import task_submit
from tests.servers import ensure_public_arena

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_burst_of_1000_at_the_bound_never_exceeds_it(alice, roster, settings):
    ensure_public_arena()
    bound = 300
    settings.ARENA = settings.ARENA.replace(queue_max=bound, team_queue_quota=10_000)

    def submit(i: int) -> str:
        try:
            task_submit(
                user=alice, instruction=f"task number {i} of the burst", rng=random.Random(i)
            )
            return "admitted"
        except ApplicationError as exc:
            return f"{exc.status} {exc.code}"
        finally:
            connection.close()  # each worker thread has its own connection

    with ThreadPoolExecutor(max_workers=16) as pool:
        outcomes = list(pool.map(submit, range(1000)))

    assert outcomes.count("admitted") == bound
    assert outcomes.count("429 queue_full") == 1000 - bound
    assert Battle.objects.filter(status="queued").count() == bound
    assert Task.objects.count() == bound  # no task without its battle
    assert Run.objects.count() == 2 * bound  # no battle without both runs
    assert not Task.objects.filter(battles=None).exists()
