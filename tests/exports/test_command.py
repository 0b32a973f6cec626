"""manage.py export_data: writes the export, prints what it wrote, and refuses what it
cannot do with a command error that says what to change."""

import io
import json

import pytest
from django.core.management import CommandError, call_command

from tests.exports.factories import old_battle, with_steps
from tests.ratings.factories import judges


def test_the_command_writes_an_export_and_says_what(tmp_path, alice, roster):
    agents = {a.slug: a for a in roster}
    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=judges(1)[0])
    with_steps(battle, screenshot_bytes=300)
    out = io.StringIO()
    call_command(
        "export_data",
        "--out",
        str(tmp_path / "x"),
        "--format",
        "parquet",
        "--with-screenshots",
        "--delay-days",
        "0",
        stdout=out,
        stderr=io.StringIO(),
    )
    text = out.getvalue()
    assert (
        "exported 1 battles, 1 votes, 0 vote_reasons, 0 follow_ups, 0 exclusions, 0 ratings, "
        "2 runs, 4 steps" in text
    )
    assert "note: not every battle of the published board" in text  # no refit yet
    manifest = json.loads((tmp_path / "x" / "manifest.json").read_text())
    assert manifest["filters"]["formats"] == ["parquet"]
    assert manifest["screenshots"] == {"files": 4, "bytes": 1200}
    assert not list((tmp_path / "x").glob("*.jsonl"))


def test_the_command_refuses_with_a_message(tmp_path, db):
    with pytest.raises(CommandError, match="no arena 'nowhere'; the arenas are: public"):
        call_command("export_data", "--out", str(tmp_path / "a"), "--arena", "nowhere")
    with pytest.raises(CommandError, match="unknown format"):
        call_command("export_data", "--out", str(tmp_path / "b"), "--format", "csv")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "old.txt").write_text("x")
    with pytest.raises(CommandError, match="not an empty directory"):
        call_command("export_data", "--out", str(tmp_path / "c"), stderr=io.StringIO())
