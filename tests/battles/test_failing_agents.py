"""Agents that fail are caught, not fed battles (issue 14, point 3): a lane that fails
through its agent's own fault is told from one the arena failed; K such lanes in a row
pause the agent with the reason its team and the admins read; the battle it failed is
failed in words and its task re-run once with a fresh pair; and failed lanes count as
exposure, so the matchmaker stops favouring an agent whose battles always fail."""

import random

import pytest
from django.utils import timezone

from accounts.models import Team
from agents.models import Agent, AgentStandingLogEntry, Arena
from agents.selectors import agent_status
from battles import admission_db
from battles.matchmaking import first_probabilities
from battles.models import Battle, Run, Task
from battles.services import battle_lanes_account, battle_run, task_submit
from battles.services.admission import roster_candidate
from battles.services.creation import battle_create
from battles.services.failures import WHY_ALREADY_RERUN, WHY_NO_PAIR
from tests.conftest import api_client_for
from tests.servers import free_port


def failing_remote(team: Team | None = None, slug: str = "down-lab") -> Agent:
    """A remote agent whose endpoint nobody listens on (loopback, allow-listed)."""
    return Agent.objects.create(
        arena=Arena.objects.public(), slug=slug, display_name="Down Lab", kind="remote",
        params={"endpoint": f"http://127.0.0.1:{free_port()}/act", "timeout_s": 1},
        remote_secret="a-secret", team=team,
    )  # fmt: skip


def set_pair(battle: Battle, a: Agent, b: Agent) -> None:
    Battle.objects.filter(pk=battle.pk).update(agent_a=a, agent_b=b)
    Run.objects.filter(battle=battle, side="A").update(agent=a)
    Run.objects.filter(battle=battle, side="B").update(agent=b)


def ended_battle(task: Task, a: Agent, b: Agent, *, a_end: str, b_end: str, b_fault: bool):
    """A running battle whose lanes have ended as told (no sandbox: the accounting alone)."""
    battle = battle_create(task=task, agent_a=a, agent_b=b, redundancy_target=1)
    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.RUNNING)
    now = timezone.now()
    Run.objects.filter(battle=battle, side="A").update(
        status="ended", end_reason=a_end, ended_at=now
    )
    Run.objects.filter(battle=battle, side="B").update(
        status="ended", end_reason=b_end, agent_fault=b_fault, ended_at=now,
        error="agent error: the agent gave no answer in 3 attempts" if b_fault else "",
    )  # fmt: skip
    return battle


@pytest.fixture
def task(alice):
    return Task.objects.create(team=alice.memberships.get().team, submitter=alice,
                               instruction="List the files in the workspace")  # fmt: skip


# --- a whole battle: a real lane against an endpoint that is down --------------------------


@pytest.mark.django_db(transaction=True)
def test_a_battle_an_agent_failed_is_failed_in_words_and_re_run_without_it(
    alice, charlie, roster, settings, client
):
    settings.ARENA = settings.ARENA.replace(internal_allowlist="127.0.0.0/8", sandbox_desktop=False)
    down = failing_remote(team=charlie.memberships.get().team)
    battle = task_submit(user=alice, instruction="List the files", rng=random.Random(0))
    set_pair(battle, Agent.objects.get(slug="rulebook"), down)

    battle_run(battle_id=battle.pk)

    battle.refresh_from_db()
    b = battle.runs.get(side="B")
    assert (b.end_reason, b.agent_fault) == ("error", True)
    assert "connection failed" in b.error
    a = battle.runs.get(side="A")
    assert a.end_reason != "error" and not a.agent_fault
    assert battle.status == "failed"  # never screened, judged or rated
    rerun = Battle.objects.get(rerun_of=battle)
    assert battle.failure_reason == (
        "Side B could not finish: its agent failed (it could not be reached, or it broke "
        "the rules every agent plays by). The battle is not judged and counts for no one. "
        f"Your task runs again with a fresh pair of agents: battle #{rerun.pk}."
    )
    assert "Down Lab" not in battle.failure_reason  # blind: no agent named
    assert rerun.task_id == battle.task_id and rerun.status == "queued"
    assert down.pk not in (rerun.agent_a_id, rerun.agent_b_id)
    assert rerun.submitted_at == battle.submitted_at  # keeps its place in the FIFO
    down.refresh_from_db()
    assert down.failure_streak == 1 and not down.is_paused

    client.force_login(alice)  # the submitter reads what happened, and follows the re-run
    page = client.get(f"/battles/{battle.pk}/").content.decode()
    assert "its agent failed" in page and f'href="/battles/{rerun.pk}/"' in page
    again = client.get(f"/battles/{rerun.pk}/").content.decode()
    assert "This battle runs your task again" in again

    # and an API user reads the same, on both battles; nobody outside the team does
    api = api_client_for(alice)
    failed = api.get(f"/api/battles/{battle.pk}/").json()["what_happened"]
    assert failed == {
        "headline": "The battle failed.",
        "detail": "It counts for neither agent.",
        "failure_reason": battle.failure_reason,
        "rerun_of": None,
        "rerun": rerun.pk,
    }
    assert api.get(f"/api/battles/{rerun.pk}/").json()["what_happened"]["rerun_of"] == battle.pk
    outsider = api_client_for(charlie).get(f"/api/battles/{battle.pk}/")
    assert outsider.status_code == 404  # not charlie's team's battle, never served to him


@pytest.mark.django_db(transaction=True)
def test_an_agent_crashing_in_the_arena_s_own_code_is_not_its_fault(
    alice, roster, monkeypatch, settings
):
    from agents import policies

    settings.ARENA = settings.ARENA.replace(sandbox_desktop=False)

    def explode(self, observation):
        raise RuntimeError("boom")

    monkeypatch.setattr(policies.IdlePolicy, "next_action", explode)
    battle = task_submit(user=alice, instruction="list the files", rng=random.Random(0))
    set_pair(battle, Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="idle"))

    battle_run(battle_id=battle.pk)

    battle.refresh_from_db()
    b = battle.runs.get(side="B")
    assert (b.end_reason, b.agent_fault) == ("error", False)
    assert battle.status == "screening"  # the usual path: SPEC §5.3 excludes it later
    assert not Battle.objects.filter(rerun_of=battle).exists()
    assert Agent.objects.get(slug="idle").failure_streak == 0


# --- the accounting: streaks, the automatic pause, one re-run per task ---------------------


def test_k_failures_in_a_row_pause_the_agent_with_the_reason(task, roster, charlie, settings):
    settings.ARENA = settings.ARENA.replace(agent_failure_pause=2)
    down = failing_remote(team=charlie.memberships.get().team)
    rulebook = Agent.objects.get(slug="rulebook")

    battle_lanes_account(battle_id=ended_battle(
        task, rulebook, down, a_end="delivered", b_end="error", b_fault=True).pk)  # fmt: skip
    down.refresh_from_db()
    assert (down.failure_streak, down.is_paused) == (1, False)

    other = Task.objects.create(team=task.team, submitter=task.submitter, instruction="Other")
    battle_lanes_account(battle_id=ended_battle(
        other, rulebook, down, a_end="delivered", b_end="error", b_fault=True).pk)  # fmt: skip
    down.refresh_from_db()
    assert (down.failure_streak, down.is_paused) == (2, True)
    assert down.paused_reason.startswith("Paused automatically: its last 2 runs failed")
    assert "the agent gave no answer in 3 attempts" in down.paused_reason
    entry = AgentStandingLogEntry.objects.get(agent=down)
    assert (entry.changes, entry.actor, entry.note) == (
        {"is_paused": [False, True]},
        None,
        down.paused_reason,
    )
    # no longer drawn
    locked = admission_db.admission_lock(slug="public", team_id=task.team_id)
    assert down.pk not in [entry.agent_id for entry in locked.roster]
    # its team and the admins read why
    status = agent_status(down)
    assert status["state"] == "paused" and status["paused_automatically"]
    assert status["paused_reason"] == down.paused_reason


def test_a_lane_that_worked_resets_the_streak_and_the_other_side_never_pays(task, roster):
    rulebook, surveyor = Agent.objects.get(slug="rulebook"), Agent.objects.get(slug="surveyor")
    Agent.objects.filter(pk=surveyor.pk).update(failure_streak=2)
    battle = ended_battle(task, rulebook, surveyor, a_end="error", b_end="gave_up", b_fault=False)

    assert battle_lanes_account(battle_id=battle.pk) is False  # nobody's fault: screened

    assert Agent.objects.get(pk=surveyor.pk).failure_streak == 0
    assert Agent.objects.get(pk=rulebook.pk).failure_streak == 0  # an arena error: no count
    assert Battle.objects.get(pk=battle.pk).status == "running"  # the caller screens it


def test_a_task_is_re_run_at_most_once(task, roster, charlie):
    down = failing_remote(team=charlie.memberships.get().team)
    rulebook = Agent.objects.get(slug="rulebook")
    first = ended_battle(task, rulebook, down, a_end="delivered", b_end="error", b_fault=True)
    battle_lanes_account(battle_id=first.pk)
    rerun = Battle.objects.get(rerun_of=first)
    # the re-run fails through an agent too: no third battle
    Battle.objects.filter(pk=rerun.pk).update(status=Battle.Status.RUNNING)
    Run.objects.filter(battle=rerun).update(status="ended", end_reason="error", agent_fault=True)

    assert battle_lanes_account(battle_id=rerun.pk) is True

    rerun.refresh_from_db()
    assert rerun.status == "failed" and rerun.failure_reason.endswith(WHY_ALREADY_RERUN)
    assert Battle.objects.filter(task=task).count() == 2
    with pytest.raises(Exception, match="battle_one_rerun_per_task"):
        Battle.objects.create(
            arena=first.arena, team=first.team, task=task, agent_a=rulebook,
            agent_b=Agent.objects.get(slug="idle"), submitted_at=timezone.now(), rerun_of=rerun,
        )  # fmt: skip


def test_no_re_run_when_no_fresh_pair_can_be_drawn(task, roster, charlie):
    down = failing_remote(team=charlie.memberships.get().team)
    Agent.objects.filter(slug__in=["surveyor", "idle"]).update(is_paused=True)
    battle = ended_battle(
        task, Agent.objects.get(slug="rulebook"), down,
        a_end="delivered", b_end="error", b_fault=True,
    )  # fmt: skip

    battle_lanes_account(battle_id=battle.pk)

    battle.refresh_from_db()
    assert battle.status == "failed" and battle.failure_reason.endswith(WHY_NO_PAIR)
    assert not Battle.objects.filter(rerun_of=battle).exists()


def test_a_battle_no_longer_running_is_left_alone(task, roster, charlie):
    down = failing_remote(team=charlie.memberships.get().team)
    battle = ended_battle(task, Agent.objects.get(slug="rulebook"), down,
                          a_end="delivered", b_end="error", b_fault=True)  # fmt: skip
    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.FAILED)
    assert battle_lanes_account(battle_id=battle.pk) is False
    assert Agent.objects.get(pk=down.pk).failure_streak == 0


# --- exposure: failed lanes count for the matchmaker --------------------------------------


def test_an_always_failing_agent_s_draw_probability_falls(task, roster, charlie):
    down = failing_remote(team=charlie.memberships.get().team)

    def p_down() -> float:
        locked = admission_db.admission_lock(slug="public", team_id=task.team_id)
        candidates = [roster_candidate(entry) for entry in locked.roster]
        ids = [c.agent_id for c in candidates]
        return first_probabilities(candidates)[ids.index(down.pk)]

    before = p_down()
    assert before == pytest.approx(0.25)  # four agents, none exposed yet
    rulebook = Agent.objects.get(slug="rulebook")
    for n in range(6):
        other = Task.objects.create(team=task.team, submitter=task.submitter, instruction=f"T{n}")
        ended_battle(other, rulebook, down, a_end="delivered", b_end="error", b_fault=True)
    after = p_down()

    # (6 + κ)^-½ against κ^-½ for the three others: 0.25 → 0.17
    assert after == pytest.approx((6 + 4) ** -0.5 / ((6 + 4) ** -0.5 + 3 * 4**-0.5))
    assert after < before
    # test drives' lanes and lanes that were not its fault never count
    assert Run.objects.filter(agent=down, agent_fault=True).count() == 6
    Run.objects.filter(agent=rulebook).update(end_reason="error", agent_fault=False)
    locked = admission_db.admission_lock(slug="public", team_id=task.team_id)
    counts = {entry.agent_id: entry.failed_lanes for entry in locked.roster}
    assert counts[rulebook.pk] == 0 and counts[down.pk] == 6


# --- who sees the status ------------------------------------------------------------------


def test_the_reason_is_shown_to_the_team_and_admins_only(
    client, charlie, alice, admin_user, roster, settings
):
    down = failing_remote(team=charlie.memberships.get().team)
    Agent.objects.filter(pk=down.pk).update(
        is_paused=True, paused_reason="Paused automatically: its last 3 runs failed"
    )

    client.force_login(charlie)
    page = client.get("/my-agents/").content.decode()
    assert "Down Lab" in page and "Paused automatically: its last 3 runs failed" in page

    client.force_login(alice)  # another team: neither listed nor reachable
    assert "Down Lab" not in client.get("/my-agents/").content.decode()
    assert client.get(f"/my-agents/{down.pk}/test-drives/").status_code == 404

    client.force_login(admin_user)
    listing = client.get("/admin/agents/agent/").content.decode()
    assert "Paused automatically: its last 3 runs failed" in listing
