"""The leak scan reads what a judge reads of a coding battle (docs/leak-scan.md): each
side's diff, the changed files' paths and the success and test commands' output. A
model named there excludes the battle as named_model, as anywhere else."""

import pytest

from agents.models import Agent
from battles.coding_models import CodingOutcome
from battles.models import Battle
from judging.services import battle_screen
from tests.coding.page_factories import FIX_DIFF, NOTES_DIFF, coding_battle
from tests.judging.leak_factories import note_of

SCREENING = Battle.Status.SCREENING


def diff_adding(line: str) -> str:
    return f"diff --git a/calc.py b/calc.py\n+++ b/calc.py\n@@ -0,0 +1 @@\n+{line}\n"


@pytest.fixture
def coder(roster):
    """An agent with a model id and an alias, as a CLI agent is entered."""
    return Agent.objects.create(
        arena=roster[0].arena, slug="cx-coder", display_name="CX Coder", kind="cli",
        provider="openai", model_id="gpt-5-codex", aliases=["Codex"], params={"cli": "codex"},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("# written by gpt-5-codex", "gpt-5-codex"),
        ("# Co-authored-by: Codex <noreply@openai.com>", "Codex"),
        ("x = 1  # G P T 5 codex was here", "gpt-5-codex"),
    ],
)
def test_a_diff_naming_the_model_excludes_the_battle(alice, coder, line, named):
    battle = coding_battle(alice, diffs=(FIX_DIFF, diff_adding(line)), status=SCREENING)

    assert battle_screen(battle_id=battle.pk) == "named_model"

    battle.refresh_from_db()
    assert battle.status == Battle.Status.EXCLUDED
    assert note_of(battle).startswith(f"side B diff names {named!r}: …")


def test_a_name_in_the_test_output_excludes_the_battle(alice, coder):
    battle = coding_battle(
        alice, outputs=("", "test_model.py::test_name PASSED (model gpt-5-codex)"),
        status=SCREENING,
    )  # fmt: skip

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side B success command output names 'gpt-5-codex'")


def test_a_name_in_a_changed_file_path_excludes_the_battle(alice, coder):
    new_file = "diff --git a/codex_notes.md b/codex_notes.md\nnew file mode 100644\n"
    battle = coding_battle(alice, diffs=(new_file, NOTES_DIFF), status=SCREENING)
    CodingOutcome.objects.filter(run__battle=battle, run__side="A").update(
        files=[{"path": "codex_notes.md", "added": 1, "removed": 0, "binary": False}]
    )

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side A changed file path names 'Codex'")


def test_a_name_split_by_escaped_bytes_is_still_found(alice, coder):
    battle = coding_battle(
        alice, diffs=(diff_adding("# by Co\\x00dex"), NOTES_DIFF), status=SCREENING
    )

    assert battle_screen(battle_id=battle.pk) == "named_model"

    assert note_of(battle).startswith("side A diff, escapes skipped names 'Codex'")


def test_clean_diffs_and_output_open_the_battle_for_judging(alice, coder):
    battle = coding_battle(alice, status=SCREENING)

    assert battle_screen(battle_id=battle.pk) == ""

    battle.refresh_from_db()
    assert battle.status == Battle.Status.JUDGING
