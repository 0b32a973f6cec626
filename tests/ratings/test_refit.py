"""The periodic refit: snapshots, what enters the fit, r stamps, concurrency, the job."""

import threading
from datetime import timedelta

import numpy as np
import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from agents.models import Agent, Arena
from battles.models import Battle
from ratings import bradley_terry
from ratings.jobs import ratings_refit
from ratings.models import AgentRating, RatingPoint, RatingSnapshot, RefitState
from ratings.refit import FitParams, arena_refit, refit_input
from ratings.services import rating_apply_battle
from tests.ratings.factories import decided_battle, judges, round_robin


@pytest.fixture(autouse=True)
def _few_replicates(settings):
    settings.ARENA = settings.ARENA.replace(bootstrap_replicates=50)


@pytest.fixture
def agents(roster):
    return {a.slug: a for a in roster}


@pytest.fixture
def crowd(db):
    return judges(4)


@pytest.fixture
def played(alice, agents, crowd, rng):
    """Rulebook > Surveyor > Idle, 20 rounds: 40 battles each, all non-provisional."""
    order = [agents["rulebook"], agents["surveyor"], agents["idle"]]
    return round_robin(alice, order, crowd, rounds=20, rng=rng)


def board():
    return {r["slug"]: r for r in Client().get("/api/leaderboard/").json()["rows"]}


def test_a_refit_publishes_a_snapshot_with_intervals_and_stamps_r(played, agents):
    # Given 60 decided battles no refit has seen
    assert Battle.objects.filter(incorporation__isnull=False).count() == 0

    # When the refit runs
    result = arena_refit(arena_id=Arena.objects.public().pk)

    # Then one snapshot holds every agent with a rating, a 95% interval and a rank band
    snapshot = result.snapshot
    assert (snapshot.battles, snapshot.bootstrap_replicates, result.stamped) == (60, 50, 60)
    points = {p.agent.slug: p for p in snapshot.points.select_related("agent")}
    assert set(points) == {"rulebook", "surveyor", "idle"}
    for point in points.values():
        assert (point.battles, point.provisional, point.unavailable) == (40, False, "")
        assert point.lower < point.rating < point.upper
        assert 1 <= point.rank_lower <= point.rank_upper <= 3
    # centred on the non-provisional agents: their mean is R0
    assert np.mean([p.rating for p in points.values()]) == pytest.approx(1000.0, abs=1e-6)
    assert points["rulebook"].rating > points["surveyor"].rating > points["idle"].rating
    # And r is stamped on every battle in it, and the board shows the published values
    assert Battle.objects.filter(incorporation__isnull=True).count() == 0
    rows = board()
    assert rows["rulebook"]["rating"] == round(points["rulebook"].rating, 1)
    assert rows["rulebook"]["rank"] == 1 and rows["idle"]["rank"] == 3
    assert (rows["idle"]["lower"], rows["idle"]["upper"]) == (
        round(points["idle"].lower, 1),
        round(points["idle"].upper, 1),
    )


def test_the_snapshot_matches_the_pure_fit_of_the_same_battles(played):
    arena_id = Arena.objects.public().pk
    snapshot = arena_refit(arena_id=arena_id).snapshot
    data = refit_input(arena_id=arena_id, params=FitParams.from_settings())
    expected = bradley_terry.rate(
        data.a, data.b, data.y, n_agents=3, w=data.w, count=data.count, clustered=data.clustered,
        reference=np.ones(3, dtype=bool), bootstrap=50, seed=snapshot.seed,
    )  # fmt: skip
    got = {p.agent_id: p for p in snapshot.points.all()}
    for estimate in expected.agents:
        point = got[data.agent_ids[estimate.index]]
        assert point.rating == pytest.approx(estimate.rating)
        assert (point.rank_lower, point.rank_upper) == (estimate.rank_lower, estimate.rank_upper)
    assert snapshot.clusters == 4 and snapshot.robust_published is True


def test_an_unchanged_input_records_the_run_but_writes_no_snapshot(played):
    arena_id = Arena.objects.public().pk
    first = arena_refit(arena_id=arena_id)
    second = arena_refit(arena_id=arena_id)
    assert first.snapshot is not None and second.snapshot is None
    assert RatingSnapshot.objects.count() == 1
    state = RefitState.objects.get(arena_id=arena_id)
    assert (state.runs, state.last_wrote_snapshot, state.snapshot_id) == (
        2,
        False,
        first.snapshot.pk,
    )


def test_a_new_battle_writes_a_new_snapshot_and_keeps_the_history(played, alice, agents, crowd):
    arena_id = Arena.objects.public().pk
    arena_refit(arena_id=arena_id)
    late = decided_battle(
        submitter=alice, a=agents["idle"], b=agents["rulebook"], outcome="A", judge=crowd[0]
    )
    second = arena_refit(arena_id=arena_id).snapshot
    assert second is not None and second.battles == 61
    assert RatingSnapshot.objects.count() == 2
    assert RatingPoint.objects.filter(agent=agents["idle"]).count() == 2
    assert Battle.objects.filter(pk=late.pk, incorporation__isnull=False).exists()


def test_a_changed_weight_is_a_changed_input(played):
    arena_id = Arena.objects.public().pk
    arena_refit(arena_id=arena_id)
    Battle.objects.filter(pk=played[0].pk).update(evidence_weight=0.25)
    assert arena_refit(arena_id=arena_id).snapshot is not None


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ("decided", "named_model"),
        ("excluded", "no_trajectory"),
        ("excluded", "no_admissible_vote"),
        ("judging", ""),
    ],
)
def test_excluded_and_undecided_battles_never_enter_the_fit(
    played, alice, agents, crowd, status, reason
):
    arena_id = Arena.objects.public().pk
    before = arena_refit(arena_id=arena_id).snapshot
    # Given a battle that would swing the ratings if it counted
    outsider = decided_battle(
        submitter=alice,
        a=agents["idle"],
        b=agents["rulebook"],
        outcome="A",
        judge=crowd[0],
        status=status,
        exclusion_reason=reason,
        weight=1.0,
    )
    # When the refit runs again: the input is unchanged
    assert arena_refit(arena_id=arena_id).snapshot is None
    data = refit_input(arena_id=arena_id, params=FitParams.from_settings())
    assert outsider.pk not in data.unstamped_ids and data.battles == before.battles
    assert data.digest == before.digest
    assert not Battle.objects.filter(pk=outsider.pk, incorporation__isnull=False).exists()
    # And the agent page's head-to-head does not count it
    page = Client().get(f"/agents/{agents['idle'].slug}/").content.decode()
    row = page.split('data-opponent="rulebook"')[1].split("</tr>")[0]
    assert f'<td class="wins">{_wins(agents["idle"], agents["rulebook"])}</td>' in row


def _wins(agent, opponent) -> int:
    return (
        Battle.objects.filter(
            status="decided", exclusion_reason="", agent_a=agent, agent_b=opponent, outcome="A"
        ).count()
        + Battle.objects.filter(
            status="decided", exclusion_reason="", agent_a=opponent, agent_b=agent, outcome="B"
        ).count()
    )


def test_a_provisional_agent_never_shows_a_refit_number(played, alice, agents, crowd):
    # Given a new agent with 29 battles, all wins over the field and losses mixed in
    newcomer = Agent.objects.create(
        arena=agents["idle"].arena, slug="newcomer", display_name="Newcomer", kind="builtin",
        builtin_policy="idle",
    )  # fmt: skip
    for i in range(29):
        decided_battle(
            submitter=alice,
            a=newcomer,
            b=agents["surveyor"],
            outcome="A" if i % 3 else "B",
            judge=crowd[i % 4],
        )
    arena_refit(arena_id=Arena.objects.public().pk)
    # Then its point has its battle count but no number of any kind
    point = RatingPoint.objects.get(agent=newcomer)
    assert (point.battles, point.provisional) == (29, True)
    assert [point.rating, point.lower, point.upper, point.rank_lower, point.rank_upper] == [
        None
    ] * 5
    # And the board shows its streaming value, labelled provisional, after the rated ones
    api = Client().get("/api/leaderboard/").json()
    rows = api["rows"]
    mine = next(r for r in rows if r["slug"] == "newcomer")
    assert (mine["rating"], mine["lower"], mine["upper"], mine["rank"]) == (None,) * 4
    assert mine["provisional"] is True and mine["fit_battles"] == 29
    assert rows[-1]["slug"] == "newcomer"
    page = Client().get("/").content.decode()
    row = page.split('data-agent="newcomer"')[1].split("</tr>")[0]
    assert "provisional" in row and 'class="ibar full"' in row
    assert 'class="value"' not in row and 'class="interval' not in row
    agent_page = Client().get("/agents/newcomer/").content.decode()
    assert '<strong id="published-rating">provisional</strong>' in agent_page


def test_a_retired_agent_leaves_the_board_but_its_battles_stay_in_the_fit(played, agents):
    arena_id = Arena.objects.public().pk
    before = arena_refit(arena_id=arena_id).snapshot
    # When Idle retires
    Agent.objects.filter(pk=agents["idle"].pk).update(retired_at=timezone.now())
    # Then the input is the same (no new snapshot) and Idle still has its point
    assert arena_refit(arena_id=arena_id).snapshot is None
    assert RatingPoint.objects.filter(snapshot=before, agent=agents["idle"]).exists()
    # And the board lists only the others, whose published ratings still count Idle
    rows = board()
    assert set(rows) == {"rulebook", "surveyor"}
    surveyor = RatingPoint.objects.get(snapshot=before, agent=agents["surveyor"])
    assert rows["surveyor"]["rating"] == round(surveyor.rating, 1)
    # while the agent's own page, with its history, remains
    assert Client().get("/agents/idle/").status_code == 200


def test_an_agent_the_fit_cannot_place_shows_the_reason(played, alice, agents, crowd):
    # Given an agent that won all its 30 battles (separated: no finite MLE)
    champion = Agent.objects.create(
        arena=agents["idle"].arena, slug="champion", display_name="Champion", kind="builtin",
        builtin_policy="idle",
    )  # fmt: skip
    for i in range(30):
        decided_battle(
            submitter=alice, a=champion, b=agents["idle"], outcome="A", judge=crowd[i % 4]
        )
    arena_refit(arena_id=Arena.objects.public().pk)
    row = board()["champion"]
    assert (row["rating"], row["provisional"], row["unavailable"]) == (None, False, "separated")
    page = Client().get("/").content.decode()
    cell = page.split('data-agent="champion"')[1].split("</tr>")[0]
    assert '<span class="label unavailable"' in cell and "separated" in cell


def test_the_cluster_is_the_recorded_cluster_judge(alice, agents, crowd):
    first = decided_battle(
        submitter=alice, a=agents["idle"], b=agents["rulebook"], outcome="B", judge=crowd[0]
    )
    second = decided_battle(
        submitter=alice, a=agents["idle"], b=agents["rulebook"], outcome="A", judge=crowd[1]
    )
    # the second was decided by crowd[0] per judging's record, whatever its votes say
    Battle.objects.filter(pk=second.pk).update(cluster_judge=crowd[0])
    data = refit_input(arena_id=first.arena_id, params=FitParams.from_settings())
    assert data.clustered.cluster.tolist() == [0]  # one judge, one pair: one row
    Battle.objects.filter(pk=second.pk).update(cluster_judge=crowd[1])
    changed = refit_input(arena_id=first.arena_id, params=FitParams.from_settings())
    assert changed.clustered.cluster.tolist() == [0, 1] and changed.digest != data.digest


def test_a_null_evidence_weight_counts_one(alice, agents, crowd):
    decided_battle(
        submitter=alice, a=agents["idle"], b=agents["rulebook"], outcome="tie", judge=crowd[0],
        weight=None,
    )  # fmt: skip
    data = refit_input(arena_id=Arena.objects.public().pk, params=FitParams.from_settings())
    assert (data.w.tolist(), data.y.tolist()) == ([1.0], [0.5])


def test_staleness_shows_the_oldest_decided_battle_not_yet_in_a_refit(played, alice, agents):
    arena_id = Arena.objects.public().pk
    arena_refit(arena_id=arena_id)
    decided_battle(
        submitter=alice,
        a=agents["idle"],
        b=agents["rulebook"],
        outcome="B",
        judged_at=timezone.now() - timedelta(seconds=90),
    )
    refit = Client().get("/api/leaderboard/").json()["refit"]
    assert refit["pending_battles"] == 1
    assert 90 <= refit["oldest_pending_age_s"] < 100
    assert refit["period_s"] == 60 and refit["battles"] == 60
    assert refit["staleness_bound_s"] == pytest.approx(60 + refit["compute_ms"] / 1000, abs=0.1)
    page = Client().get("/").content.decode()
    assert "1 decided battle not yet in a refit" in page
    assert f'<span class="compute-ms">{refit["compute_ms"]}</span>' in page


def test_the_streaming_update_no_longer_stamps_r(alice, agents, crowd):
    battle = decided_battle(
        submitter=alice, a=agents["idle"], b=agents["rulebook"], outcome="A", judge=crowd[0]
    )
    rating_apply_battle(battle=battle)
    assert not Battle.objects.filter(pk=battle.pk, incorporation__isnull=False).exists()
    assert AgentRating.objects.get(agent=agents["idle"]).rated_battles == 1


def test_the_job_refits_every_arena_with_battles(played):
    written = ratings_refit()
    assert written == list(RatingSnapshot.objects.values_list("pk", flat=True))
    assert ratings_refit() == []


def test_the_refit_is_on_the_scheduler_every_period(settings):
    import django_rq
    from rq.cron import CronScheduler

    scheduler = CronScheduler(connection=django_rq.get_connection("ratings"))
    scheduler.load_config_from_file("arena_site.cron")
    (job,) = [j for j in scheduler.get_jobs() if j.func is ratings_refit]
    assert (job.queue_name, job.interval) == ("ratings", settings.ARENA.refit_period_s)


@pytest.mark.django_db(transaction=True)
def test_two_refits_at_once_write_one_snapshot(alice, agents, crowd, rng):
    # Given rated battles and two workers running the job at the same moment
    round_robin(alice, list(agents.values()), crowd, rounds=12, rng=rng)
    arena_id = Arena.objects.public().pk
    barrier = threading.Barrier(2)
    results, errors = [], []

    def run():
        try:
            barrier.wait()
            results.append(arena_refit(arena_id=arena_id))
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    # Then exactly one wrote a snapshot; both runs are on record
    assert errors == []
    assert sorted(r.snapshot is not None for r in results) == [False, True]
    assert RatingSnapshot.objects.count() == 1
    assert RefitState.objects.get(arena_id=arena_id).runs == 2
    assert Battle.objects.filter(incorporation__isnull=True).count() == 0


def test_a_refit_that_does_not_converge_is_logged_and_stored_as_not_converged(
    played, monkeypatch, caplog
):
    # An iteration budget of one Newton step cannot reach the optimum from the start:
    # the snapshot is published (the board must move on) but flagged, and logged
    monkeypatch.setattr(bradley_terry, "MAX_ITERATIONS", 1)
    with caplog.at_level("ERROR", logger="ratings.refit"):
        snapshot = arena_refit(arena_id=Arena.objects.public().pk).snapshot
    assert snapshot is not None
    assert (snapshot.converged, snapshot.iterations) == (False, 1)
    assert any("did NOT converge" in r.getMessage() for r in caplog.records)


def test_the_snapshot_records_which_interval_it_publishes(played):
    snapshot = arena_refit(arena_id=Arena.objects.public().pk).snapshot
    # four judges for three agents: G ≥ m, the clustered interval with t(G* − 1)
    assert snapshot.clusters == 4 and snapshot.robust_published
    assert snapshot.interval == "clustered"
    assert 1 < snapshot.effective_clusters <= 4
    assert snapshot.critical_value > 2.5  # t with about three degrees of freedom
    assert snapshot.converged
    refit = Client().get("/api/leaderboard/").json()["refit"]
    assert refit["interval"] == "clustered"
    assert refit["critical_value"] == pytest.approx(snapshot.critical_value)
    assert refit["effective_clusters"] == pytest.approx(snapshot.effective_clusters)
