"""The demo board (docs/leaderboard.md "The demo board"): an arena of simulated judgments
between the built-ins, refitted for real, shown and labelled on the leaderboard while
the public arena has no rating, and kept out of every real arena's figures, the live
board's socket, exports, evaluations and the operators' counts."""

import io
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from accounts.models import Team
from agents.models import DEMO_ARENA_SLUG, Agent, Arena
from arena_site.asgi import application
from arena_site.ops_selectors import battle_figures, vote_figures
from battles.models import Battle
from battles.services import task_submit
from evals.services.creation import _evaluable
from exports.selectors import exportable_battles, exportable_exclusions
from exports.services import ExportError, export_write
from judging.models import Vote
from judging.services import judge_next
from judging.services.demo_board import DEMO_TASKS, demo_board_seed
from ratings.demo_votes import DEMO_BATTLES, DEMO_JUDGES, demo_judgments
from ratings.models import RatingPoint, RatingSnapshot, RefitState
from ratings.refit import arena_refit
from ratings.selectors import board_arena, leaderboard_rows, rated_battles
from ratings.services import leaderboard_push
from tests.ratings.factories import judges, round_robin

LABEL = "simulated votes between the built-in agents, shown until this arena"


@pytest.fixture(autouse=True)
def _demo_on(settings):
    settings.ARENA = settings.ARENA.replace(demo_board=True, bootstrap_replicates=50)


@pytest.fixture
def demo(roster):
    """The public roster, then the demo board built as seed_demo builds it."""
    demo_board_seed()
    return Arena.objects.get(slug=DEMO_ARENA_SLUG)


# --- the simulated judgments (pure) -------------------------------------------------


@pytest.mark.parametrize(
    ("slugs", "battles", "seed"),
    [
        (["rulebook", "surveyor", "idle"], 360, 37),
        (["a", "b"], 10, 1),
        (["x", "y", "z", "w"], 50, 9),
    ],
)
def test_the_judgments_are_a_fixed_draw(slugs, battles, seed):
    first = demo_judgments(slugs, battles=battles, seed=seed)
    assert first == demo_judgments(slugs, battles=battles, seed=seed)
    assert len(first) == battles
    assert all(j.a != j.b and {j.a, j.b} <= set(range(len(slugs))) for j in first)
    assert {j.outcome for j in first} <= {"A", "B", "tie"}
    assert all(0 <= j.judge < DEMO_JUDGES for j in first)
    assert first != demo_judgments(slugs, battles=battles, seed=seed + 1)


def test_the_stronger_agent_wins_more_often():
    slugs = ["rulebook", "idle"]
    wins = {"rulebook": 0, "idle": 0}
    for j in demo_judgments(slugs, battles=2000):
        if j.outcome != "tie":
            winner = j.a if j.outcome == "A" else j.b
            wins[slugs[winner]] += 1
    assert wins["rulebook"] > 2 * wins["idle"]  # 200 points apart: about 3 in 4


@pytest.mark.parametrize(("slugs", "battles"), [(["solo"], 10), (["a", "b"], 0)])
def test_a_draw_that_cannot_be_made_is_refused(slugs, battles):
    with pytest.raises(ValueError):
        demo_judgments(slugs, battles=battles)


# --- building it -----------------------------------------------------------------------


def test_the_demo_board_is_built_through_the_real_doors(demo, roster):
    assert demo.demo and demo.slug == "demo"
    agents = Agent.objects.filter(arena=demo)
    assert {a.slug for a in agents} == {a.slug for a in roster}
    assert not agents.filter(pk__in=[a.pk for a in roster]).exists()  # copies of its own
    battles = Battle.objects.filter(arena=demo)
    assert battles.count() == DEMO_BATTLES
    assert battles.filter(status="decided", decision_source="import").count() == DEMO_BATTLES
    assert (
        battles.filter(streaming_applied__isnull=False).count() == DEMO_BATTLES
    )  # the streaming door
    assert battles.values("task").distinct().count() == len(DEMO_TASKS)
    assert battles.values("team__memberships").distinct().get()["team__memberships"] is None
    votes = Vote.objects.filter(battle__arena=demo)
    assert votes.count() == DEMO_BATTLES and votes.filter(admissible=True, counted=True).count()
    accounts = get_user_model().objects.filter(pk__in=votes.values("judge"))
    assert accounts.count() == DEMO_JUDGES
    assert not any(user.has_usable_password() for user in accounts)  # nobody logs in as one
    # the real refit published ratings with intervals and rank bands for every built-in
    rows = leaderboard_rows(arena_id=demo.pk)
    assert [r["rank"] for r in rows] == [1, 2, 3]
    assert all(r["lower"] < r["rating"] < r["upper"] and r["rank_lower"] for r in rows)
    assert rows[-1]["slug"] == "idle"
    assert all(r["votes"] > 30 for r in rows)  # the streaming counts moved too


def test_building_it_again_changes_nothing(demo):
    snapshot = RefitState.objects.get(arena=demo).snapshot_id
    lines = demo_board_seed()
    assert "already in place" in lines[0]
    assert Battle.objects.filter(arena=demo).count() == DEMO_BATTLES
    assert RefitState.objects.get(arena=demo).snapshot_id == snapshot
    assert RatingSnapshot.objects.filter(arena=demo).count() == 1


def test_off_it_builds_nothing(roster, settings):
    settings.ARENA = settings.ARENA.replace(demo_board=False)
    assert demo_board_seed() == ["demo board: off (ARENA_DEMO_BOARD)"]
    assert not Arena.objects.filter(slug=DEMO_ARENA_SLUG).exists()


def test_a_real_arena_named_demo_is_never_made_one(roster):
    real = Arena.objects.create(slug=DEMO_ARENA_SLUG, name="A lab's demo arena")
    lines = demo_board_seed()
    assert "not built" in lines[0] and "real battles" in lines[0]
    real.refresh_from_db()
    assert not real.demo and not Battle.objects.filter(arena=real).exists()
    assert not Agent.objects.filter(arena=real).exists()


def test_a_persons_account_is_never_a_simulated_judge(roster):
    get_user_model().objects.create_user("demo:judge-1", password="a real password 123")
    lines = demo_board_seed()
    assert "not built" in lines[0] and "demo:judge-1" in lines[0]
    assert not Battle.objects.filter(arena__slug=DEMO_ARENA_SLUG).exists()
    assert not Vote.objects.exists()


def test_seed_demo_builds_it_before_the_real_battles(roster):
    out = io.StringIO()
    call_command("seed_demo", "--no-battles", stdout=out)
    assert f"demo board: {DEMO_BATTLES} simulated battles written" in out.getvalue()
    assert Arena.objects.get(slug=DEMO_ARENA_SLUG).demo


# --- the pages -----------------------------------------------------------------------


def test_the_board_stands_in_while_the_public_arena_has_no_rating(demo):
    page = Client().get("/").content.decode()
    assert "Demo data:" in page and LABEL in page and "never exported" in page
    assert 'href="/?arena=public"' in page  # the real board, as it stands
    assert page.count('<span class="value">') == 3  # ranked, with numbers
    assert 'ws-connect="/ws/leaderboard/"' not in page  # never live
    assert 'href="/agents/rulebook/?arena=demo"' in page
    legend = page.split('id="legend"')[0].rsplit("<details", 1)[1]
    assert "open" not in legend  # folded away


def test_the_public_board_is_one_click_away_and_says_where_the_demo_is(demo):
    page = Client().get("/?arena=public").content.decode()
    assert LABEL not in page and 'id="demo-note"' not in page
    assert 'href="/?arena=demo"' in page
    assert '<span class="value">' not in page  # nothing rated there yet


def test_once_the_public_arena_is_rated_it_is_the_board(demo, alice, roster, rng):
    round_robin(alice, roster, judges(3), rounds=16, rng=rng)
    arena_refit(arena_id=roster[0].arena_id)
    page = Client().get("/").content.decode()
    assert 'id="demo-note"' not in page and page.count('<span class="value">') == 3
    assert 'href="/?arena=demo"' in page
    demo_page = Client().get("/?arena=demo").content.decode()
    assert "Demo data:" in demo_page and "see the real board" in demo_page


def test_the_demo_boards_other_pages_are_labelled_too(demo):
    agent = Client().get("/agents/rulebook/?arena=demo").content.decode()
    assert "Demo data:" in agent and 'href="/?arena=demo"' in agent
    public_agent = Client().get("/agents/rulebook/").content.decode()
    assert "Demo data:" not in public_agent  # a plain link is the public arena's agent
    matrices = Client().get("/matrices/?arena=demo").content.decode()
    assert "Demo data:" in matrices and "category=browsing&amp;arena=demo" in matrices


@pytest.mark.parametrize(
    "path",
    ["/", "/?arena=demo", "/?arena=demo&category=browsing", "/?arena=public",
     "/agents/rulebook/?arena=demo", "/matrices/?arena=demo"],
)  # fmt: skip
def test_the_demo_boards_pages_speak_plain_words(demo, path):
    from tests.arena_site.test_plain_words import findings

    response = Client().get(path)
    assert response.status_code == 200
    assert findings(response.content.decode()) == []


@pytest.mark.parametrize("query", ["?arena=elsewhere", "?arena=" + "x" * 300])
def test_an_unknown_board_is_a_404_that_says_which_exist(demo, query):
    for path in ("/", "/matrices/"):
        response = Client().get(path + query)
        assert response.status_code == 404
        assert "board here; arena is public" in response.content.decode()
    assert Client().get("/agents/rulebook/" + query).status_code == 404


def test_with_the_knob_off_the_demo_board_is_gone(demo, settings):
    settings.ARENA = settings.ARENA.replace(demo_board=False)
    response = Client().get("/?arena=demo")
    assert response.status_code == 404
    assert "There is no demo board on this arena" in response.content.decode()
    assert Client().get("/agents/rulebook/?arena=demo").status_code == 404
    page = Client().get("/").content.decode()
    assert "Demo data:" not in page and "?arena=demo" not in page
    assert board_arena("") == (Arena.objects.public(), False)


# --- kept out ----------------------------------------------------------------------------


def test_every_public_arena_means_the_real_ones(demo):
    assert not rated_battles(arena_id=None).filter(arena=demo).exists()
    assert rated_battles(arena_id=demo.pk).count() == DEMO_BATTLES  # its own board
    Battle.objects.filter(arena=demo, pk=Battle.objects.filter(arena=demo).first().pk).update(
        status="excluded", exclusion_reason="named_model"
    )
    far = Battle.objects.filter(arena=demo).latest("decided_at").decided_at
    assert not exportable_battles(arena_id=None, cutoff=far).filter(arena=demo).exists()
    assert not exportable_exclusions(arena_id=None, cutoff=far).filter(arena=demo).exists()


def test_the_demo_board_is_never_exported(demo, tmp_path):
    api = APIClient()
    for path in (
        "/api/open-data/",
        "/api/open-data/battles.jsonl",
        "/api/open-data/archive.tar.gz",
    ):
        response = api.get(path + "?arena=demo")
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"
    with pytest.raises(ExportError, match="demo board"):
        export_write(out_dir=tmp_path / "x", arena_id=demo.pk)
    assert not (tmp_path / "x").exists()
    with pytest.raises(CommandError, match="simulated data is never exported"):
        call_command("export_data", "--out", str(tmp_path / "y"), "--arena", "demo")


def test_the_demo_agents_are_never_evaluated_or_matched(demo, alice):
    team = alice.memberships.first().team
    offered = list(_evaluable(team))
    assert offered and not any(agent.arena_id == demo.pk for agent in offered)
    public = Arena.objects.public()
    assert not Agent.objects.filter(arena=public, pk__in=Agent.objects.filter(arena=demo)).exists()


def test_tasks_go_to_the_public_arena_and_no_judge_is_served_a_demo_battle(demo, alice, judge):
    battle = task_submit(user=alice, instruction="what is 1+1", rng=random.Random(3))
    public = Arena.objects.public()
    assert battle.arena_id == public.pk
    assert {battle.agent_a.arena_id, battle.agent_b.arena_id} == {public.pk}
    # nothing of the demo's is open for judging, or ever was outside its transaction
    assert not Battle.objects.filter(arena=demo).exclude(status="decided").exists()
    assert judge_next(judge=judge) is None


def test_the_operators_figures_leave_it_out(demo):
    assert battle_figures().by_status["decided"] == 0
    assert battle_figures().decided_by_source["import"] == 0
    assert vote_figures()["admissible"] == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("other", ["demo", "a team's own"])
def test_the_live_boards_socket_never_carries_another_arenas_rows(roster, settings, other):
    settings.ARENA = settings.ARENA.replace(demo_board=True, bootstrap_replicates=50)
    demo_board_seed()
    demo = Arena.objects.get(slug=DEMO_ARENA_SLUG)
    if other != "demo":  # a team's private arena with a rated board of its own
        team = Team.objects.create(name="Private Lab")
        demo.slug, demo.team, demo.demo = "private-lab", team, False
        demo.save(update_fields=["slug", "team", "demo"])

    async def scenario():
        from channels.db import database_sync_to_async

        socket = WebsocketCommunicator(
            application, "/ws/leaderboard/", headers=[(b"origin", b"http://127.0.0.1")]
        )
        connected, _ = await socket.connect()
        assert connected
        initial = await socket.receive_from(timeout=5)
        await database_sync_to_async(leaderboard_push)(arena_id=demo.pk)
        nothing = await socket.receive_nothing(timeout=1)
        await socket.disconnect()
        return initial, nothing

    initial, nothing = async_to_sync(scenario)()
    assert '<span class="value">' not in initial  # the public board's rows
    assert nothing
    assert RatingPoint.objects.filter(snapshot__arena=demo).count() == 3


# make run's embedded database: a whole migrate on SQLite is `make soak`'s (as in
# tests/arena_site/test_database_url.py).
@pytest.mark.soak
def test_on_sqlite_the_demo_board_is_built_and_refitted_too(tmp_path, settings):
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{tmp_path / 'arena.sqlite3'}",
        "ARENA_DATA_DIR": str(tmp_path),
        "ARENA_DEMO_BOARD": "true",
        "ARENA_CACHE_PREFIX": settings.CACHES["default"]["KEY_PREFIX"] + "-sqlite",
    }
    root = Path(__file__).resolve().parents[2]

    def manage(*args: str) -> str:
        done = subprocess.run([sys.executable, "manage.py", *args], cwd=root, env=env,
                              capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    manage("migrate", "--noinput", "-v", "0")
    assert f"{DEMO_BATTLES} simulated battles written" in manage("seed_demo", "--no-battles")
    board = manage(
        "shell",
        "-c",
        "from agents.models import Arena; from ratings.selectors import leaderboard_rows; "
        "print([(r['rank'], r['slug'], r['lower'] < r['rating'] < r['upper']) "
        "for r in leaderboard_rows(arena_id=Arena.objects.get(slug='demo').pk)])",
    )
    assert board.strip().endswith("(3, 'idle', True)]") and "(1, " in board and "(2, " in board
