"""Why an export is empty, said where people look: the open-data index and the export
command say when battles are published (the delay), how many wait, and when the first
of them appears; a battle whose submitter has not consented never counts as waiting."""

from datetime import timedelta
from io import StringIO

import pytest
import time_machine
from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from accounts.models import Consent
from tests.exports.factories import old_battle
from tests.ratings.factories import judges


@pytest.fixture
def agents(roster, settings):
    settings.ARENA = settings.ARENA.replace(export_delay_days=7)
    return {a.slug: a for a in roster}


def index() -> dict:
    response = APIClient().get("/api/open-data/")
    assert response.status_code == 200
    return response.json()


def test_an_arena_with_no_decided_battle_says_nothing_is_decided_yet(agents):
    body = index()
    assert (body["published_battles"], body["waiting_battles"]) == (0, 0)
    assert body["next_publication_at"] is None
    assert body["note"] == (
        "Nothing is published yet: no battle has been decided. Battles are published 7 days "
        "after they are decided (or excluded), if the person who submitted the task agreed "
        "to publication."
    )


def test_a_fresh_arena_says_when_its_first_battle_is_published(alice, agents):
    now = timezone.now().replace(microsecond=0)
    judge = judges(1)[0]
    with time_machine.travel(now, tick=False):
        old_battle(alice, agents["rulebook"], agents["idle"], judge=judge, days=2)
        old_battle(alice, agents["idle"], agents["rulebook"], judge=judge, days=1)
        body = index()
    first = now - timedelta(days=2) + timedelta(days=7)
    assert (body["published_battles"], body["waiting_battles"]) == (0, 2)
    assert body["next_publication_at"] == first.isoformat().replace("+00:00", "Z")
    assert body["note"].startswith("Nothing is published yet. Battles are published 7 days")
    assert body["note"].endswith(f"2 battles will be; the first on {first:%Y-%m-%d %H:%M} UTC.")


def test_once_battles_are_published_the_note_only_states_the_rule(alice, agents):
    old_battle(alice, agents["rulebook"], agents["idle"], judge=judges(1)[0], days=30)
    body = index()
    assert (body["published_battles"], body["waiting_battles"]) == (1, 0)
    assert body["note"].startswith("Battles are published 7 days after")


def test_a_battle_without_consent_is_not_counted_as_waiting(alice, agents):
    old_battle(alice, agents["rulebook"], agents["idle"], judge=judges(1)[0], days=2)
    Consent.objects.filter(user=alice).delete()
    body = index()
    assert (body["published_battles"], body["waiting_battles"]) == (0, 0)
    assert body["next_publication_at"] is None


def test_the_export_command_says_why_its_tables_are_empty(alice, agents, tmp_path):
    old_battle(alice, agents["rulebook"], agents["idle"], judge=judges(1)[0], days=2)
    out = StringIO()
    call_command("export_data", "--out", str(tmp_path / "out"), stdout=out, stderr=StringIO())
    said = out.getvalue()
    assert "exported 0 battles" in said
    assert "note: Nothing is published yet. Battles are published 7 days after" in said
    assert "1 battle will be; the first on " in said
