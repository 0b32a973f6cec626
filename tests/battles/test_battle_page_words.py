"""The battle page says where the battle stands in words, and names who fought only to
those who may know it: never while judges are still voting, never to a judge who was
served the battle but has not voted, and never to an outsider."""

import re

import pytest
from django.utils import timezone

from battles.models import Battle
from tests.judging.battle_factories import ended_battle


@pytest.fixture
def battle(alice, roster):
    return ended_battle(alice, a="rulebook", b="idle")


def page(client, user, battle) -> tuple[int, str]:
    client.force_login(user)
    response = client.get(f"/battles/{battle.pk}/")
    return response.status_code, response.content.decode()


def names(battle) -> list[str]:
    return [battle.agent_a.display_name, battle.agent_b.display_name]


def test_while_judging_the_team_reads_the_state_in_words_and_no_name(client, alice, battle):
    status, html = page(client, alice, battle)
    assert status == 200
    assert "Waiting for judges." in html
    assert 'id="battle-status">judging<' in html  # the live status tag stays
    assert "Side A finished and delivered its answer." in html
    assert "Side B gave up." in html
    assert 'id="battle-reveal"' not in html
    assert [n for n in names(battle) if re.search(rf"\b{re.escape(n)}\b", html)] == []


def test_once_decided_the_team_reads_the_outcome_and_who_fought(client, alice, battle):
    Battle.objects.filter(pk=battle.pk).update(
        status="decided", outcome="B", decision_source="crowd", decided_at=timezone.now()
    )
    _, html = page(client, alice, battle)
    assert "Side B did the task better." in html
    assert "Decided by independent judges; it counts for the ratings." in html
    reveal = html[html.index('id="battle-reveal"') :]
    assert all(name in reveal for name in names(battle))
    assert f"/battles/{battle.pk}/runs/A/" in reveal and f"/battles/{battle.pk}/runs/B/" in reveal


def test_an_exclusion_is_said_in_words(client, alice, battle):
    Battle.objects.filter(pk=battle.pk).update(
        status="excluded", exclusion_reason="ended_by_submitter"
    )
    _, html = page(client, alice, battle)
    assert "Excluded from the ratings." in html
    assert (
        "Reason: the submitter ended one side early. The battle counts for neither agent." in html
    )
    assert "ended_by_submitter" not in html


def test_a_judge_served_the_decided_battle_without_a_vote_sees_no_name(client, judge, battle):
    from judging.models import Assignment

    Assignment.objects.create(judge=judge, battle=battle, served_at=timezone.now())
    Battle.objects.filter(pk=battle.pk).update(
        status="decided", outcome="A", decision_source="crowd", decided_at=timezone.now()
    )
    status, html = page(client, judge, battle)
    assert status == 200 and "Side A did the task better." in html
    assert 'id="battle-reveal"' not in html
    assert [n for n in names(battle) if re.search(rf"\b{re.escape(n)}\b", html)] == []


def test_an_outsider_gets_404_and_no_words(client, charlie, battle):
    Battle.objects.filter(pk=battle.pk).update(status="decided", outcome="A")
    status, html = page(client, charlie, battle)
    assert status == 404
    assert "did the task better" not in html


def test_ending_a_side_asks_first(client, alice, battle):
    Battle.objects.filter(pk=battle.pk).update(status="running")
    _, html = page(client, alice, battle)
    forms = re.findall(r'<form[^>]*action="/battles/\d+/end/[AB]/"[^>]*>', html)
    assert len(forms) == 2
    assert all("data-confirm=" in form and "not rated" in form for form in forms)
