"""manage.py import_votes: historical judgments as decided, imported battles."""

import io

import pytest
from django.core.management import CommandError, call_command

from agents.models import Agent
from battles.models import Battle, Task
from judging.models import Vote
from ratings.models import AgentRating, ImportedBattle, VoteImport
from ratings.refit import arena_refit
from tests.ratings.test_cli_inputs import BAD_FILES

CSV = """left,right,result,who,prompt,w
Rulebook,surveyor,L,ann,find the cheapest flight,1
surveyor,idle,R,bob,,0.5
idle,Rulebook,draw,ann,find the cheapest flight,1
Rulebook,idle,skip-me,ann,,1
"""
FLAGS = [
    "--a", "left", "--b", "right", "--winner", "result", "--win-a", "L", "--win-b", "R",
    "--tie", "draw", "--skip", "skip-me", "--judge", "who", "--task", "prompt", "--weight", "w",
]  # fmt: skip


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "history.csv"
    path.write_text(CSV)
    return path


def test_rows_become_decided_imported_battles_with_votes(roster, csv_file, capsys):
    call_command("import_votes", str(csv_file), *FLAGS)

    battles = list(Battle.objects.order_by("pk").select_related("agent_a", "agent_b", "task"))
    assert [(b.agent_a.slug, b.agent_b.slug, b.outcome, b.evidence_weight) for b in battles] == [
        ("rulebook", "surveyor", "A", 1.0),
        ("surveyor", "idle", "B", 0.5),
        ("idle", "rulebook", "tie", 1.0),
    ]
    assert {b.status for b in battles} == {"decided"} and {b.exclusion_reason for b in battles} == {
        ""
    }
    # one task per distinct task value; the blank one gets the file's placeholder task
    assert battles[0].task_id == battles[2].task_id != battles[1].task_id
    assert battles[0].task.instruction == "find the cheapest flight"
    assert Task.objects.count() == 2
    # a judge user per judge value, one admissible vote per battle, the cluster judge set
    votes = list(Vote.objects.order_by("battle_id").select_related("judge"))
    assert [v.judge.username for v in votes] == ["import:ann", "import:bob", "import:ann"]
    assert all(v.admissible and not v.is_submitter for v in votes)
    assert [b.cluster_judge_id for b in battles] == [v.judge_id for v in votes]
    # marked as imported, with the file's digest, and the skipped row counted
    vote_import = VoteImport.objects.get()
    assert (vote_import.rows, vote_import.battles, vote_import.file_name) == (4, 3, "history.csv")
    assert ImportedBattle.objects.filter(vote_import=vote_import).count() == 3
    # the streaming Elo took them; the refit publishes them
    assert AgentRating.objects.get(agent__slug="rulebook").rated_battles == 2
    assert arena_refit(arena_id=battles[0].arena_id).snapshot.battles == 3
    assert "Imported 3 battles" in capsys.readouterr().out


def test_a_second_import_of_the_same_file_changes_nothing(roster, csv_file, capsys):
    call_command("import_votes", str(csv_file), *FLAGS)
    call_command("import_votes", str(csv_file), *FLAGS)
    assert Battle.objects.count() == 3 and VoteImport.objects.count() == 1
    assert "imported already" in capsys.readouterr().out


def test_unknown_agents_stop_the_import_and_are_listed(roster, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("agent_a,agent_b,winner\nRulebook,Gpt Nine,A\nNova,idle,B\n")
    with pytest.raises(CommandError, match=r"2 agent\(s\).*Gpt Nine, Nova.*--create-agents"):
        call_command("import_votes", str(path))
    assert Battle.objects.count() == 0 and VoteImport.objects.count() == 0


def test_create_agents_makes_retired_placeholders_off_the_board(roster, tmp_path, client):
    path = tmp_path / "x.csv"
    path.write_text("agent_a,agent_b,winner\nRulebook,Gpt Nine,A\n")
    call_command("import_votes", str(path), "--create-agents")
    placeholder = Agent.objects.get(display_name="Gpt Nine")
    assert (placeholder.slug, placeholder.kind) == ("gpt-nine", "builtin")
    assert placeholder.retired_at is not None
    rows = client.get("/api/leaderboard/").json()["rows"]
    assert "gpt-nine" not in {r["slug"] for r in rows}
    assert Vote.objects.get().judge.username == "import:unknown"


def test_a_bad_row_rolls_back_the_whole_file(roster, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("agent_a,agent_b,winner\nRulebook,idle,A\nRulebook,idle,maybe\n")
    with pytest.raises(CommandError, match=r"line 3: winner value 'maybe' is not mapped"):
        call_command("import_votes", str(path))
    assert Battle.objects.count() == 0


def test_a_missing_column_names_the_available_ones(roster, tmp_path):
    path = tmp_path / "x.csv"
    path.write_text("p,q,r\nRulebook,idle,A\n")
    with pytest.raises(CommandError, match=r"column 'agent_a' \(--a\).*available columns: p, q, r"):
        call_command("import_votes", str(path))


def test_imported_tasks_belong_to_no_team_member(roster, csv_file, alice, api):
    call_command("import_votes", str(csv_file), *FLAGS)
    task = Task.objects.first()
    assert task.team.memberships.count() == 0
    response = api(alice).get(f"/api/tasks/{task.pk}/")
    assert response.status_code == 404
    assert "cheapest flight" not in api(alice).get("/api/tasks/").content.decode()


def test_both_bad_stays_a_label_of_its_own(roster, tmp_path):
    """SPEC §7: tie and both_bad both enter the fit as ½, but storage keeps them apart."""
    path = tmp_path / "labels.csv"
    path.write_text(
        "agent_a,agent_b,winner\nrulebook,idle,tie\nidle,surveyor,Both Bad\nsurveyor,idle,A\n"
    )
    call_command("import_votes", str(path), "--tie", "tie,Both Bad")
    outcomes = list(Battle.objects.order_by("pk").values_list("outcome", flat=True))
    assert outcomes == ["tie", "both_bad", "A"]
    assert list(Vote.objects.order_by("battle_id").values_list("choice", flat=True)) == outcomes
    # ½ in the streaming update either way
    assert AgentRating.objects.get(agent__slug="idle").draws == 2


def test_imported_votes_are_not_live_metrics(roster, csv_file):
    """SPEC §6 figures describe the live arena: an import of historical votes adds no
    judgment, no decided battle and no freshness weight to them."""
    from django.utils import timezone

    from agents.models import Arena
    from ratings.metrics_selectors import arena_metrics

    arena_id = Arena.objects.public().pk
    before = arena_metrics(arena_id=arena_id, now=timezone.now())
    call_command("import_votes", str(csv_file), *FLAGS)
    after = arena_metrics(arena_id=arena_id, now=timezone.now())
    assert Battle.objects.filter(decision_source="import").count() == 3
    assert after["status_counts"] == before["status_counts"]
    assert after["latencies"]["judgment"]["n"] == 0
    assert (after["freshness"], after["duplicate_rate"]) == (
        before["freshness"],
        before["duplicate_rate"],
    )


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_files_stop_the_import_with_one_line_and_write_nothing(roster, tmp_path, name):
    """The same bad files as the CLI's (issue 15), refused before anything is written."""
    content, flags, fragments = BAD_FILES[name]
    path = tmp_path / "votes.csv"
    path.write_bytes(content)
    before = Battle.objects.count()
    with pytest.raises(CommandError) as refused:
        call_command("import_votes", str(path), *flags)
    message = str(refused.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message
    assert Battle.objects.count() == before == 0
    assert VoteImport.objects.count() == Vote.objects.count() == 0


DUPLICATES = "agent_a,agent_b,winner\nrulebook,idle,A\nidle,surveyor,B\nrulebook,idle,A\n"


def test_duplicate_rows_are_imported_and_reported(roster, tmp_path):
    path = tmp_path / "votes.csv"
    path.write_text(DUPLICATES + "idle,rulebook,B,extra\n")
    err = io.StringIO()
    call_command("import_votes", str(path), stderr=err, stdout=io.StringIO())
    assert Battle.objects.count() == 4  # two identical votes can be real
    warnings = [line for line in err.getvalue().splitlines() if line.startswith("warning")]
    assert warnings == [
        "warning: 1 duplicate row (line 4), counted as battles; pass --strict to refuse them",
        "warning: 1 row with more fields than the header (line 5), extra cells ignored; "
        "pass --strict to refuse them",
    ]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (DUPLICATES, r"^line 4 repeats line 2 cell for cell \(--strict\)"),
        (
            "agent_a,agent_b,winner\nrulebook,idle,A\nidle,surveyor,B,x\n",
            r"^line 3 has 4 fields, the header has 3 \(--strict\)",
        ),
    ],
)
def test_strict_refuses_duplicates_and_extra_fields(roster, tmp_path, content, expected):
    path = tmp_path / "votes.csv"
    path.write_text(content)
    with pytest.raises(CommandError, match=expected):
        call_command("import_votes", str(path), "--strict")
    assert Battle.objects.count() == 0 and VoteImport.objects.count() == 0


def test_a_mapped_value_may_start_with_a_dash(roster, tmp_path):
    """The mapping is handed to the CLI's parser as --flag=value, so a value such as
    "-" or "-draw" is a value, not an unknown option."""
    path = tmp_path / "votes.csv"
    path.write_text("agent_a,agent_b,winner\nrulebook,idle,-draw\nidle,rulebook,A\n")
    call_command("import_votes", str(path), tie="-draw", stdout=io.StringIO())
    assert list(Battle.objects.order_by("pk").values_list("outcome", flat=True)) == ["tie", "A"]
