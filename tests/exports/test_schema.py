"""Every row of every table matches schema.json, JSON Lines and Parquet hold the same
rows, and the manifest's digests are those of the files."""

import hashlib
import json

import pyarrow.parquet as pq
import pytest

from exports.schema import BY_NAME, DATA_CARD_VERSION, SCHEMA_VERSION, row_problems
from tests.exports.factories import excluded_battle, export, old_battle, rows, with_steps
from tests.ratings.factories import judges


@pytest.fixture
def exported(tmp_path, alice, roster):
    agents = {a.slug: a for a in roster}
    crowd = judges(2)
    first = old_battle(alice, agents["rulebook"], agents["idle"], judge=crowd[0])
    old_battle(alice, agents["surveyor"], agents["idle"], judge=crowd[1], outcome="both_bad")
    old_battle(alice, agents["rulebook"], agents["surveyor"], judge=None, weight=None)
    excluded_battle(alice, agents["rulebook"], agents["idle"])
    with_steps(first, screenshot_bytes=200)
    from ratings.refit import arena_refit

    arena_refit(arena_id=first.arena_id)
    return export(tmp_path, with_steps=True, with_screenshots=True)


def _parquet_rows(out, table):
    schema = BY_NAME[table]
    result = []
    for row in pq.read_table(out / f"{table}.parquet").to_pylist():
        for column in schema.columns:
            value = row[column.name]
            if value is not None and column.type == "timestamp":
                row[column.name] = value.isoformat()
            if value is not None and column.type == "json":
                row[column.name] = json.loads(value)
        result.append(row)
    return result


def test_every_row_matches_the_schema_and_both_formats_agree(exported):
    out, manifest = exported
    document = json.loads((out / "schema.json").read_text())
    assert (document["schema_version"], document["data_card_version"]) == (
        SCHEMA_VERSION,
        DATA_CARD_VERSION,
    )
    assert manifest["counts"] == {
        "battles": 3,
        "votes": 2,
        "vote_reasons": 0,
        "follow_ups": 0,
        "exclusions": 1,
        "ratings": 3,
        "runs": 2,
        "steps": 4,
    }
    for name, count in manifest["counts"].items():
        table = BY_NAME[name]
        assert [c["name"] for c in document["tables"][name]["columns"]] == table.names
        jsonl = rows(out, name)
        assert len(jsonl) == count
        for row in jsonl:
            assert row_problems(table, row) == [], (name, row)
        assert _parquet_rows(out, name) == jsonl, name
        arrow = pq.read_schema(out / f"{name}.parquet")
        assert arrow.names == table.names
    # an unset weight is exported as the 1 the refit uses; no judge: a cluster of its own
    last = rows(out, "battles")[-1]
    assert (last["weight"], last["judge"], last["cluster"]) == (1.0, None, f"b{last['battle_id']}")


def test_the_manifest_lists_every_file_with_its_digest(exported):
    out, manifest = exported
    listed = {f["name"]: f for f in manifest["files"]}
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert set(listed) == on_disk - {"manifest.json"}
    for name, entry in listed.items():
        data = (out / name).read_bytes()
        assert entry == {
            "name": name,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
    card = (out / "DATA_CARD.md").read_text()
    assert f"Data card version: **{DATA_CARD_VERSION}**" in card
    assert f"Schema version: **{SCHEMA_VERSION}**" in card
    assert "No licence has been set" in card


def test_a_licence_set_by_the_operator_is_on_the_card(tmp_path, alice, settings):
    settings.ARENA = settings.ARENA.replace(export_licence="CC BY 4.0")
    out, manifest = export(tmp_path)
    assert manifest["licence"] == "CC BY 4.0"
    assert "\nCC BY 4.0\n" in (out / "DATA_CARD.md").read_text()


def test_a_single_format_and_a_used_directory(tmp_path, alice):
    from exports.services import ExportError

    out, _ = export(tmp_path, formats=("jsonl",))
    assert not list(out.glob("*.parquet"))
    with pytest.raises(ExportError, match="not an empty directory"):
        export(tmp_path)
    with pytest.raises(ExportError, match="unknown format"):
        export(tmp_path, "x", formats=("csv",))
