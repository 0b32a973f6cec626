"""The open-data API: public (anyone may download the published record), each core
table as JSON Lines and the whole export as a tar.gz; bounded per address per hour;
every refusal a status and a message a person can act on."""

import io
import json
import tarfile

import pytest
from rest_framework.test import APIClient

from accounts.models import Team
from agents.models import Arena
from tests.exports.factories import old_battle
from tests.ratings.factories import judges


@pytest.fixture
def api():
    return APIClient()


@pytest.fixture
def battle(alice, roster, settings):
    settings.ARENA = settings.ARENA.replace(export_delay_days=7)
    agents = {a.slug: a for a in roster}
    return old_battle(alice, agents["rulebook"], agents["idle"], judge=judges(1)[0])


def _error(response, status, code):
    assert response.status_code == status, response.content
    body = response.json()["error"]
    assert body["code"] == code and body["message"]
    return body["message"]


def test_anyone_reads_the_index(api, battle):
    response = api.get("/api/open-data/")
    assert response.status_code == 200
    body = response.json()
    assert body["arena"] == "public" and body["delay_days"] == 7
    names = [t["name"] for t in body["tables"]]
    assert names == ["battles", "votes", "vote_reasons", "follow_ups", "exclusions", "ratings"]
    assert body["tables"][0]["url"] == "/api/open-data/battles.jsonl"
    assert body["archive_url"] == "/api/open-data/archive.tar.gz"
    assert "battles" in body["schema"]["tables"]


def test_a_table_downloads_as_json_lines(api, battle, alice):
    response = api.get("/api/open-data/battles.jsonl")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/jsonl"
    assert 'filename="public-battles.jsonl"' in response["Content-Disposition"]
    lines = b"".join(response.streaming_content).decode().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["battle_id"] for r in rows] == [battle.pk]
    assert rows[0]["judge"].startswith("j_")
    assert alice.username not in lines[0]


def test_the_archive_holds_the_export(api, battle):
    response = api.get("/api/open-data/archive.tar.gz")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/gzip"
    data = b"".join(response.streaming_content)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        names = {m.name.split("/", 1)[1] for m in archive.getmembers() if m.isfile()}
        assert all(m.uname == "" and m.uid == 0 for m in archive.getmembers())
        top = archive.getmembers()[0].name.split("/")[0]
        manifest = json.load(archive.extractfile(f"{top}/manifest.json"))
    assert {"battles.jsonl", "battles.parquet", "votes.parquet", "schema.json",
            "DATA_CARD.md", "manifest.json"} <= names  # fmt: skip
    assert "steps.jsonl" not in names
    assert manifest["counts"]["battles"] == 1


def test_refusals_say_what_to_do(api, battle, alice, settings):
    message = _error(api.get("/api/open-data/steps.jsonl"), 404, "not_found")
    assert (
        "battles.jsonl, votes.jsonl, vote_reasons.jsonl, follow_ups.jsonl, exclusions.jsonl, "
        "ratings.jsonl" in message
    )
    _error(api.get("/api/open-data/?arena=nowhere"), 404, "not_found")
    _error(api.get("/api/open-data/?arena=bad%20slug"), 400, "invalid_parameter")
    # a team's private arena is not open data
    Arena.objects.create(slug="acme-lab", name="Acme lab", team=Team.objects.get(name="Acme"))
    _error(api.get("/api/open-data/battles.jsonl?arena=acme-lab"), 404, "not_found")
    response = api.post("/api/open-data/", {}, format="json")
    assert response.status_code == 405
    # the operator may turn the API off
    settings.ARENA = settings.ARENA.replace(export_api=False)
    message = _error(api.get("/api/open-data/archive.tar.gz"), 403, "open_data_disabled")
    assert "ARENA_EXPORT_API" in message


def test_downloads_are_limited_per_address_per_hour(api, battle, settings):
    settings.ARENA = settings.ARENA.replace(export_rate_per_hour=2)
    assert api.get("/api/open-data/votes.jsonl").status_code == 200
    assert api.get("/api/open-data/ratings.jsonl").status_code == 200
    assert api.get("/api/open-data/").status_code == 200  # the index is not a download
    response = api.get("/api/open-data/archive.tar.gz")
    message = _error(response, 429, "rate_limited")
    assert 1 <= int(response["Retry-After"]) <= 3600
    assert "At most 2 open-data downloads an hour" in message
    # another address has its own allowance
    other = APIClient(REMOTE_ADDR="192.0.2.7")
    assert other.get("/api/open-data/votes.jsonl").status_code == 200
