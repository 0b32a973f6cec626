"""The judge's next battle at scale: ``Battle.admissible_votes`` is kept by every path
that changes a vote, and the served order is exactly the one the ordering contract of
``judge_next`` states, checked against that contract written as the queryset it used to
be (a count of admissible votes over every open battle). A judge's first battles come
from tasks that open on a web page, and nothing an agent does changes that."""

import datetime as dt
import random

import pytest
import time_machine

from agents.models import Agent
from battles.models import Battle, Step, Task
from judging.models import Assignment
from judging.selectors import FIRST_BATTLES
from judging.services import judge_trust_set
from judging.services.voting import vote_undo
from tests.conftest import make_person
from tests.judging.battle_factories import T0, cast, ended_battle, people, serve
from tests.judging.reference_next import reference_candidates

WEB_PAGE = "http://demo.arena.test/news/"


def opens_on(battle: Battle, url: str) -> Battle:
    Task.objects.filter(pk=battle.task_id).update(start_url=url)
    return battle


def contract_next(judge) -> int | None:
    battle = reference_candidates(judge).first()
    return battle.pk if battle else None


def recounted(battle: Battle) -> int:
    return battle.votes.filter(retracted=False, admissible=True).count()


def assert_tallies_exact() -> None:
    for battle in Battle.objects.all():
        assert battle.admissible_votes == recounted(battle), battle


@pytest.fixture
def open_battles(alice, roster):
    """Three open battles needing three votes each, the first the oldest."""
    made = [ended_battle(alice, target=3) for _ in range(3)]
    for age, battle in zip((30, 20, 10), made, strict=True):
        Battle.objects.filter(pk=battle.pk).update(ended_at=T0 - dt.timedelta(minutes=age))
    return made


def test_fewest_admissible_votes_first_then_the_oldest(open_battles, settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=60)
    first, second, third = open_battles
    crowd = people(4)
    assert serve(crowd[0]).pk == first.pk  # all at 0 votes: the oldest
    cast(crowd[0], first, "A")
    first.refresh_from_db()
    assert first.admissible_votes == 1  # counted while its undo window is still open
    assert serve(crowd[1]).pk == second.pk  # first has a vote now
    cast(crowd[1], second, "B")
    assert serve(crowd[2]).pk == third.pk
    cast(crowd[2], third, "abstain")  # a skip is no admissible vote
    assert serve(crowd[3]).pk == third.pk
    assert_tallies_exact()


def test_an_undone_vote_and_an_untrusted_judge_leave_the_count(
    open_battles, settings, django_capture_on_commit_callbacks
):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=60)
    first = open_battles[0]
    crowd = people(3)
    assert serve(crowd[0]).pk == first.pk
    cast(crowd[0], first, "A")
    first.refresh_from_db()
    assert first.admissible_votes == 1
    with time_machine.travel(T0 + dt.timedelta(seconds=40), tick=False):
        vote_undo(judge=crowd[0], battle_id=first.pk)
    first.refresh_from_db()
    assert first.admissible_votes == 0
    assert serve(crowd[2]).pk == first.pk  # the oldest at 0 votes again
    cast(crowd[2], first, "A")
    staff = make_person("operator", None, None)
    with django_capture_on_commit_callbacks(execute=True):
        judge_trust_set(judge_id=crowd[2].pk, untrusted=True, note="a bot", actor=staff)
    first.refresh_from_db()
    assert first.admissible_votes == 0
    assert_tallies_exact()


def test_a_new_judge_gets_web_tasks_first_then_the_usual_order(alice, roster):
    # Given, oldest first: a file task; a file task whose agents both browsed anyway (an
    # entrant's agent can browse wherever it likes); a task opening on about:blank; a task
    # whose instruction names a web address; and the newest, a task opening on a web page
    made = [ended_battle(alice, target=3) for _ in range(5)]
    for age, battle in zip((50, 40, 30, 20, 10), made, strict=True):
        Battle.objects.filter(pk=battle.pk).update(ended_at=T0 - dt.timedelta(minutes=age))
    files, browsed, blank, named, web = made
    Step.objects.filter(run__battle=browsed).update(
        result={"ok": True, "page": {"url": WEB_PAGE, "title": "News"}}
    )
    opens_on(blank, "about:blank")
    Task.objects.filter(pk=named.task_id).update(instruction=f"Summarise {WEB_PAGE} in a line")
    opens_on(web, WEB_PAGE)
    newcomer, regular = people(2)
    # When a new judge asks: the web tasks, though they are the newest, oldest first
    assert serve(newcomer).pk == named.pk
    cast(newcomer, named, "A")
    assert serve(newcomer).pk == web.pk
    cast(newcomer, web, "B")
    # then, with no other web task, the usual order (the oldest)
    assert serve(newcomer).pk == files.pk
    # A judge past their first battles gets the usual order with the web battle still open
    Assignment.objects.bulk_create(
        [Assignment(judge=regular, battle=ended_battle(alice, status=Battle.Status.DECIDED),
                    served_at=T0) for _ in range(FIRST_BATTLES)]
    )  # fmt: skip
    assert serve(regular).pk == files.pk
    assert contract_next(regular) == files.pk


def test_the_preference_keeps_the_conflict_and_own_team_rules(alice, charlie, judge, roster):
    """A newcomer is never served a web battle with an agent of their team, and their own
    team's web battle comes after every other team's battle."""
    entrant = next(a for a in roster if a.slug == "surveyor")
    Agent.objects.filter(pk=entrant.pk).update(team=judge.memberships.first().team)
    conflicted = opens_on(ended_battle(alice, a="surveyor", b="idle"), WEB_PAGE)
    own = opens_on(ended_battle(judge), WEB_PAGE)
    other = ended_battle(charlie)
    assert serve(judge).pk == other.pk
    cast(judge, other, "B")
    assert serve(judge).pk == own.pk
    assert conflicted.pk not in {contract_next(judge), own.pk}


def test_the_served_order_is_the_contract_in_every_case(alice, charlie, bob, judge, roster):
    """Random open battles of two teams, random votes (some skips), battles held and a
    conflict of interest: every judge, of either team or none, is served what the
    contract says, at every step."""
    rng = random.Random(13)
    # judge's team entered one of the agents: never served battles with it
    entrant = next(a for a in roster if a.slug == "surveyor")
    Agent.objects.filter(pk=entrant.pk).update(team=judge.memberships.first().team)
    battles = []
    for n in range(14):
        submitter = alice if n % 3 else charlie
        battle = ended_battle(submitter, target=3, a=rng.choice(["rulebook", "surveyor"]),
                              b="idle")  # fmt: skip
        Battle.objects.filter(pk=battle.pk).update(
            ended_at=T0 - dt.timedelta(minutes=rng.randint(1, 5))  # ties on ended_at too
        )
        opens_on(battle, rng.choice(["", "", WEB_PAGE, "about:blank"]))
        if rng.random() < 0.2:
            Task.objects.filter(pk=battle.task_id).update(instruction=f"Open {WEB_PAGE}")
        battles.append(battle)
    crowd = people(6)
    everyone = [*crowd, alice, bob, charlie, judge]
    for step in range(40):  # some judges pass their first FIRST_BATTLES battles
        person = rng.choice(everyone)
        expected = contract_next(person)
        served = serve(person)
        assert (served.pk if served else None) == expected, step
        if served is not None and rng.random() < 0.7:
            cast(person, served, rng.choice(["A", "B", "tie", "abstain"]))
    assert_tallies_exact()
    assert Battle.objects.filter(status=Battle.Status.JUDGING).exists()
