"""The pages of reasons with votes: the judge page's form (blind: sides A and B only, even
inside the undo window), its refusals, the agent page's "What judges said" block and the
staff judging-quality table."""

import datetime as dt
import re

import pytest
import time_machine
from django.contrib.auth import get_user_model

from agents.models import Agent
from judging.models import VoteReason
from tests.judging.battle_factories import READ, T0, cast, ended_battle, judge_on, serve


def form_url(battle) -> str:
    return f"/judge/{battle.pk}/reasons/"


def logged_in(client, user):
    client.force_login(user)
    return client


def identity_hits(html: str, battle) -> list[str]:
    names = []
    for agent in (battle.agent_a, battle.agent_b):
        names += [*agent.identity_strings(), agent.provider]
    return [n for n in names if n and re.search(rf"(?<![a-z0-9]){re.escape(n.lower())}(?![a-z0-9])",
                                                html.lower())]  # fmt: skip


def test_the_judge_page_holds_a_placeholder_asking_after_the_vote(client, alice, judge, roster):
    battle = ended_battle(alice)
    page = logged_in(client, judge).get("/judge/").content.decode()
    assert f'hx-get="{form_url(battle)}"' in page
    assert 'hx-trigger="htmx:afterRequest from:#vote-form"' in page
    assert 'id="reasons-form"' not in page


def test_before_the_vote_the_form_is_an_empty_placeholder(client, alice, judge, roster):
    battle = ended_battle(alice)
    serve(judge)
    response = logged_in(client, judge).get(form_url(battle))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="vote-reasons"' in html and "checkbox" not in html
    refused = client.post(form_url(battle), {"tags_A": ["completed"]})
    assert refused.status_code == 400
    assert "vote first" in refused.content.decode()
    assert not VoteReason.objects.exists()


def test_inside_the_undo_window_the_form_names_sides_only(client, alice, judge, roster, settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=60)
    battle = ended_battle(alice)
    serve(judge)
    voted = T0 + READ
    cast(judge, battle, "A", voted)
    with time_machine.travel(voted + dt.timedelta(seconds=3), tick=False):
        html = logged_in(client, judge).get(form_url(battle)).content.decode()
        saved = client.post(
            form_url(battle),
            {"tags_A": ["completed", "efficient"], "note_A": "tidy", "tags_B": ["gave_up"]},
        )
    assert "Side A" in html and "Side B" in html
    assert html.count('type="checkbox"') == 2 * len(VoteReason.Tag.values)
    assert 'maxlength="500"' in html
    assert identity_hits(html, battle) == []
    assert saved.status_code == 200
    assert "Saved." in saved.content.decode()
    assert identity_hits(saved.content.decode(), battle) == []
    stored = {r.side: (r.tags, r.note) for r in VoteReason.objects.all()}
    assert stored == {"A": (["completed", "efficient"], "tidy"), "B": (["gave_up"], "")}
    # the form shows what is stored
    again = client.get(form_url(battle)).content.decode()
    assert re.search(r'value="efficient" checked', again)
    assert not re.search(r'value="planning" checked', again)


def test_the_form_refuses_an_unknown_tag_and_a_long_note(client, alice, judge, roster):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    logged_in(client, judge)
    unknown = client.post(form_url(battle), {"tags_A": ["made_up"]})
    long = client.post(form_url(battle), {"note_B": "x" * 501})
    assert (unknown.status_code, long.status_code) == (400, 400)
    assert "Unknown tag" in unknown.content.decode()
    assert "at most 500" in long.content.decode()
    assert not VoteReason.objects.exists()


def test_an_outsider_gets_404_from_the_form(client, alice, judge, charlie, roster):
    battle = ended_battle(alice)
    judge_on(judge, battle, "A")
    logged_in(client, charlie)
    assert client.get(form_url(battle)).status_code == 404
    assert client.post(form_url(battle), {"tags_A": ["completed"]}).status_code == 404
    assert not VoteReason.objects.exists()


def test_the_agent_page_loads_what_judges_said(client, alice, judge, roster):
    page = client.get("/agents/rulebook/").content.decode()
    assert 'hx-get="/agents/rulebook/reasons/"' in page

    empty = client.get("/agents/rulebook/reasons/").content.decode()
    assert 'id="no-tags"' in empty

    battle = ended_battle(alice)
    judge_on(judge, battle, "A")  # decided at once (window 0, one judge wanted)
    logged_in(client, judge).post(form_url(battle), {"tags_A": ["completed", "self_corrected"]})
    client.logout()

    html = client.get("/agents/rulebook/reasons/").content.decode()
    assert '<strong id="tagged-votes">1</strong>' in html
    row = re.search(r'<tr data-tag="completed">.*?</tr>', html, re.S).group(0)
    assert re.search(r'class="num count">1 <span class="muted">of 1</span>', row)
    row = re.search(r'<tr data-tag="false_success">.*?</tr>', html, re.S).group(0)
    assert 'class="num count">0 ' in row
    assert 'id="no-tags"' in client.get("/agents/idle/reasons/").content.decode()
    assert client.get("/agents/no-such-agent/reasons/").status_code == 404
    assert client.get("/agents/rulebook/reasons/?arena=elsewhere").status_code == 404


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_user("operator", password="x", is_staff=True)


def test_the_quality_page_tables_the_tags_per_agent(client, alice, judge, roster, staff):
    battle = ended_battle(alice)
    judge_on(judge, battle, "B")
    logged_in(client, judge).post(form_url(battle), {"tags_A": ["gave_up"], "tags_B": ["careful"]})
    assert client.get("/judging/quality/").status_code == 404  # not staff

    html = logged_in(client, staff).get("/judging/quality/").content.decode()
    table = re.search(r'<table class="reason-table".*?</table>', html, re.S).group(0)
    for slug, code in (("rulebook", "gave_up"), ("idle", "careful")):
        row = re.search(rf'<tr data-agent="{slug}">(.*?)</tr>', table, re.S).group(1)
        cells = re.findall(r'<td class="num[^"]*">(\d+)</td>', row)
        assert cells[0] == "1"  # tagged
        counts = [int(c) for c in cells[1:]]
        assert counts[VoteReason.Tag.values.index(code)] == 1 and sum(counts) == 1
    assert Agent.objects.get(slug="rulebook").display_name in table


def test_the_agent_block_reads_in_a_fixed_number_of_queries(
    client, alice, roster, django_assert_max_num_queries
):
    from tests.judging.battle_factories import people

    for judge in people(5):
        battle = ended_battle(alice)
        judge_on(judge, battle, "A")
        logged_in(client, judge).post(form_url(battle), {"tags_A": ["completed"]})
    client.logout()
    with django_assert_max_num_queries(4):  # arena, agent, probation, the tag sets
        html = client.get("/agents/rulebook/reasons/").content.decode()
    assert '<strong id="tagged-votes">5</strong>' in html
