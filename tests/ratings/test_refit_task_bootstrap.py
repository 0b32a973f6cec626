"""The board's bootstrap over whole tasks (Arena.bootstrap_unit = tasks): the refit reads
the battles summed per (task, pair) from PostgreSQL and its rank bands are those of a
hand-rolled resampling of tasks with the snapshot's seed; the board says what it
resampled and how many tasks; the choice is part of the input's digest."""

import numpy as np
import pytest
from django.test import Client

from agents.models import Arena
from battles.models import Battle, Task
from ratings.bradley_terry import newton
from ratings.category_boards import category_board_build
from ratings.models import RatingSnapshot
from ratings.refit import FitParams, arena_refit, refit_input
from ratings.services import OUTCOME_Y
from tests.ratings.factories import decided_battle, judges

REPLICATES = 60
TASKS = 12


@pytest.fixture(autouse=True)
def _few_replicates(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=REPLICATES, n0=5)


def choose(unit: str) -> Arena:
    arena = Arena.objects.public()
    arena.bootstrap_unit = unit
    arena.save(update_fields=["bootstrap_unit"])
    return arena


def shared_tasks(alice, roster, rng, *, crowd: int) -> list[Battle]:
    """Twelve tasks of five battles each among the three built-in agents: the stronger
    agent of a pair usually wins, but each task favours one agent of its own (a task is
    one unit of evidence, its battles alike); ``crowd`` judges take turns."""
    agents = list(roster)
    voters = judges(crowd)
    team = alice.memberships.first().team
    made = []
    for t in range(TASKS):
        task = Task.objects.create(team=team, submitter=alice, instruction=f"task {t}")
        favourite = agents[t % 3]
        for k in range(5):
            first, second = rng.sample(agents, 2)
            stronger = first if agents.index(first) < agents.index(second) else second
            winner = favourite if favourite in (first, second) else stronger
            if rng.random() < 0.25:  # upsets keep every agent placeable
                winner = second if winner is first else first
            outcome = "tie" if rng.random() < 0.1 else "A" if winner is first else "B"
            made.append(
                decided_battle(submitter=alice, a=first, b=second, outcome=outcome,
                               judge=voters[(t * 5 + k) % crowd], task=task)
            )  # fmt: skip
    return made


def distinct_tasks(alice, roster, rng) -> list[Battle]:
    """Forty battles, each on a task of its own."""
    agents, crowd, made = list(roster), judges(2), []
    for k in range(40):
        first, second = rng.sample(agents, 2)
        outcome = rng.choice(["A", "A", "B", "tie"])
        made.append(decided_battle(submitter=alice, a=first, b=second, outcome=outcome,
                                   judge=crowd[k % 2]))  # fmt: skip
    return made


def reference_bands(arena_id: int, *, seed: int, ridge: float, replicates: int):
    """Rank bands by resampling tasks by hand: the rated battles one by one, per
    replicate each task drawn ``times`` times (multinomial over the tasks in id order,
    from one generator seeded with ``seed``), its battles counted that many times;
    Newton refits warm-started from the full fit; ranks with ties shared; the 2.5th
    percentile of the best ranks (lower) and the 97.5th of the worst (higher)."""
    rows = list(
        Battle.objects.filter(arena_id=arena_id, status=Battle.Status.DECIDED)
        .values_list("agent_a_id", "agent_b_id", "outcome", "task_id", "evidence_weight")
        .order_by("pk")
    )
    agent_ids = sorted({agent for row in rows for agent in row[:2]})
    index = {agent: i for i, agent in enumerate(agent_ids)}
    m = len(agent_ids)
    a = np.array([index[row[0]] for row in rows])
    b = np.array([index[row[1]] for row in rows])
    y = np.array([OUTCOME_Y[row[2]] for row in rows])
    w = np.array([1.0 if row[4] is None else row[4] for row in rows])
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    y_lo = np.where(a == lo, y, 1.0 - y)
    keys, pair = np.unique(lo * m + hi, return_inverse=True)
    pi, pj = keys // m, keys % m
    task_ids, task = np.unique([row[3] for row in rows], return_inverse=True)

    def sums(times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mass = w * times
        return (
            np.bincount(pair, mass, minlength=len(keys)),
            np.bincount(pair, mass * y_lo, minlength=len(keys)),
        )

    full = newton(pi, pj, *sums(np.ones(len(rows))), n_agents=m, ridge=ridge)
    rng = np.random.default_rng(seed)
    best = np.empty((replicates, m), dtype=np.int64)
    worst = np.empty((replicates, m), dtype=np.int64)
    for r in range(replicates):
        times = rng.multinomial(len(task_ids), np.full(len(task_ids), 1.0 / len(task_ids)))
        fit = newton(pi, pj, *sums(times[task]), n_agents=m, ridge=ridge, theta0=full.theta)
        theta = fit.theta
        best[r] = 1 + (theta[None, :] > theta[:, None] + 1e-8).sum(axis=1)
        worst[r] = (theta[None, :] >= theta[:, None] - 1e-8).sum(axis=1)
    lower = np.percentile(best, 2.5, axis=0, method="lower").astype(int)
    upper = np.percentile(worst, 97.5, axis=0, method="higher").astype(int)
    return {agent: (int(lower[i]), int(upper[i])) for agent, i in index.items()}, len(task_ids)


@pytest.mark.parametrize(("crowd", "interval"), [(2, "battle"), (4, "clustered")])
def test_rank_bands_resample_whole_tasks(alice, roster, rng, crowd, interval):
    # Given battles five to a task, and an arena that resamples tasks
    shared_tasks(alice, roster, rng, crowd=crowd)
    arena = choose("tasks")

    # When the refit runs
    snapshot = arena_refit(arena_id=arena.pk).snapshot

    # Then its bands are those of resampling the twelve tasks by hand, with its seed,
    # whichever interval it publishes (judges' when there are as many as agents)
    expected, tasks = reference_bands(
        arena.pk, seed=snapshot.seed, ridge=snapshot.ridge, replicates=REPLICATES
    )
    points = {p.agent_id: p for p in snapshot.points.all()}
    assert all(p.rating is not None for p in points.values())
    assert {agent: (p.rank_lower, p.rank_upper) for agent, p in points.items()} == expected
    assert any(low < high for low, high in expected.values())  # the bands are not trivial
    assert (snapshot.interval, snapshot.bootstrap_unit, snapshot.bootstrap_clusters) == (
        interval,
        "tasks",
        TASKS,
    )
    assert tasks == TASKS


def test_the_board_says_it_resampled_tasks_and_how_many(alice, roster, rng):
    shared_tasks(alice, roster, rng, crowd=2)
    arena = choose("tasks")
    arena_refit(arena_id=arena.pk)

    refit = Client().get("/api/leaderboard/").json()["refit"]
    assert (refit["bootstrap_unit"], refit["bootstrap_clusters"]) == ("tasks", TASKS)
    page = Client().get("/").content.decode()
    assert (
        f'rank bands from {REPLICATES} resamplings of whole tasks (<span class="bootstrap-unit" '
        f'data-unit="tasks">{TASKS} tasks</span>, all the battles of a task drawn together).'
    ) in page


def test_by_default_the_board_says_battles_or_judges(alice, roster, rng):
    # Given the default choice and two judges (fewer than the three agents)
    shared_tasks(alice, roster, rng, crowd=2)
    arena = Arena.objects.public()
    assert arena.bootstrap_unit == "battles"
    snapshot = arena_refit(arena_id=arena.pk).snapshot
    assert (snapshot.interval, snapshot.bootstrap_unit, snapshot.bootstrap_clusters) == (
        "battle",
        "battles",
        None,
    )
    refit = Client().get("/api/leaderboard/").json()["refit"]
    assert (refit["bootstrap_unit"], refit["bootstrap_clusters"]) == ("battles", None)
    page = Client().get("/").content.decode()
    assert (
        'resamplings of the <span class="bootstrap-unit" data-unit="battles">battles</span>.'
        in page
    )


def test_with_as_many_judges_as_agents_the_default_resamples_judges(alice, roster, rng):
    shared_tasks(alice, roster, rng, crowd=4)
    snapshot = arena_refit(arena_id=Arena.objects.public().pk).snapshot
    assert (snapshot.interval, snapshot.bootstrap_unit, snapshot.bootstrap_clusters) == (
        "clustered",
        "judges",
        4,
    )
    refit = Client().get("/api/leaderboard/").json()["refit"]
    assert (refit["bootstrap_unit"], refit["bootstrap_clusters"]) == ("judges", 4)
    assert 'data-unit="judges">4 judges</span>, each with all the battles it decided' in (
        Client().get("/").content.decode()
    )


def test_changing_the_choice_changes_the_digest_and_refits(alice, roster, rng):
    shared_tasks(alice, roster, rng, crowd=2)
    arena_id = Arena.objects.public().pk
    by_battles = arena_refit(arena_id=arena_id).snapshot
    default = refit_input(arena_id=arena_id, params=FitParams.from_settings())
    assert (by_battles.digest, default.tasks) == (default.digest, None)

    # When the operator chooses tasks, the input's digest changes and the refit publishes
    choose("tasks")
    by_tasks = refit_input(arena_id=arena_id, params=FitParams.for_arena(arena_id))
    assert by_tasks.digest != by_battles.digest
    assert by_tasks.tasks is not None and len(np.unique(by_tasks.tasks.cluster)) == TASKS
    second = arena_refit(arena_id=arena_id).snapshot
    assert (second.digest, second.bootstrap_unit) == (by_tasks.digest, "tasks")
    assert arena_refit(arena_id=arena_id).snapshot is None  # unchanged: nothing new

    # And choosing battles again is the first input again
    choose("battles")
    third = arena_refit(arena_id=arena_id).snapshot
    assert (third.digest, third.bootstrap_unit) == (by_battles.digest, "battles")
    assert RatingSnapshot.objects.count() == 3


def test_when_every_battle_is_a_task_of_its_own_the_task_bootstrap_runs(alice, roster, rng):
    # (the battles' bootstrap in law, not draw for draw: no equality asserted)
    made = distinct_tasks(alice, roster, rng)
    arena = choose("tasks")
    snapshot = arena_refit(arena_id=arena.pk).snapshot
    assert (snapshot.bootstrap_unit, snapshot.bootstrap_clusters) == ("tasks", len(made))
    points = list(snapshot.points.all())
    assert len(points) == 3
    for point in points:
        assert point.rating is not None and 1 <= point.rank_lower <= point.rank_upper <= 3


def test_a_category_board_resamples_the_tasks_of_its_category(alice, roster, rng):
    shared_tasks(alice, roster, rng, crowd=2)
    Task.objects.update(category="browsing")
    arena = choose("tasks")
    document = category_board_build(arena_id=arena.pk, category="browsing")
    assert (document["bootstrap_unit"], document["bootstrap_clusters"]) == ("tasks", TASKS)
    assert document["enough"]
    by_battles = category_board_build(
        arena_id=arena.pk, category="browsing", params=FitParams.from_settings()
    )
    assert (by_battles["bootstrap_unit"], by_battles["bootstrap_clusters"]) == ("battles", None)
    assert by_battles["digest"] != document["digest"]


def test_operators_choose_the_unit_in_the_arena_admin(admin_client):
    arena = Arena.objects.public()
    url = f"/admin/agents/arena/{arena.pk}/change/"
    form = admin_client.get(url).content.decode()
    assert '<select name="bootstrap_unit"' in form and '<option value="tasks">' in form
    fields = {"slug": arena.slug, "name": arena.name, "machine_judge_pairwise": "on"}

    chosen = admin_client.post(url, {**fields, "bootstrap_unit": "tasks"})
    assert chosen.status_code == 302
    assert FitParams.for_arena(arena.pk).bootstrap_unit == "tasks"

    # A change that leaves it out or empty keeps the choice; an unknown unit is refused
    assert admin_client.post(url, fields).status_code == 302
    assert admin_client.post(url, {**fields, "bootstrap_unit": ""}).status_code == 302
    assert FitParams.for_arena(arena.pk).bootstrap_unit == "tasks"
    refused = admin_client.post(url, {**fields, "bootstrap_unit": "judges"})
    assert refused.status_code == 200 and "Select a valid choice." in refused.text
    assert FitParams.for_arena(arena.pk).bootstrap_unit == "tasks"
