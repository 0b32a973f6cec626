"""The judge page and its routes: blind HTML, opaque screenshot and file URLs and who may
fetch them, the vote and its reveal, retraction, and the staff judging-quality page."""

import datetime as dt
import random
import re
from pathlib import Path

import pytest
import time_machine
from django.conf import settings
from django.utils import timezone

from agents.models import Agent
from battles.models import Battle, Run, Step
from battles.services import task_submit
from judging.models import Vote
from judging.services import battle_resolve, judge_next, vote_cast
from tests.conftest import make_person
from tests.judging.battle_factories import T0

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


@pytest.fixture
def entrant(alice, roster, terms):
    """A scaffold agent with every kind of identity string: it fights side A."""
    from accounts.models import Team

    make_person("entrant-owner", "Entrant Labs", terms)
    return Agent.objects.create(
        arena=roster[0].arena,
        slug="acme-large-2",
        display_name="AcmeLarge Two",
        kind=Agent.Kind.SCAFFOLD,
        provider="acmeai",
        model_id="acme-large-2-20261101",
        aliases=["Acmebot"],
        team=Team.objects.get(name="Entrant Labs"),
    )


def add_step(run: Run, index: int, tool: str, args: dict, *, stdout: str = "") -> Step:
    relative = f"screens/run-{run.pk}/step-{index}.png"
    path = Path(settings.PRIVATE_MEDIA_ROOT) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(PNG)
    return Step.objects.create(
        run=run,
        index=index,
        tool=tool,
        args=args,
        result={"ok": True, "stdout": stdout},
        screenshot=relative,
        started_at=T0 - dt.timedelta(minutes=5, seconds=index),
        duration_ms=4321 + index,
    )


@pytest.fixture
def battle(alice, roster, entrant):
    """A finished battle awaiting judgment: side A (the entrant) named itself in its
    final message, its stdout and a delivered file's name; side B is Rulebook."""
    battle = task_submit(user=alice, instruction="Write a haiku to haiku.txt", rng=random.Random(1))
    rulebook = Agent.objects.get(slug="rulebook")
    Battle.objects.filter(pk=battle.pk).update(
        agent_a=entrant, agent_b=rulebook, status=Battle.Status.JUDGING, ended_at=T0
    )
    a = Run.objects.get(battle=battle, side="A")
    b = Run.objects.get(battle=battle, side="B")
    Run.objects.filter(pk=a.pk).update(
        agent=entrant,
        status="ended",
        end_reason="delivered",
        final_message="As AcmeLarge Two (acme-large-2-20261101 by AcmeAI) I wrote it.",
        delivered_files=[{"name": "acmebot-haiku.txt", "size": 5, "sha256": "x"}],
        started_at=T0 - dt.timedelta(minutes=5),
        ended_at=T0 - dt.timedelta(minutes=1),
    )
    Run.objects.filter(pk=b.pk).update(
        agent=rulebook, status="ended", end_reason="delivered", final_message="Done: haiku.txt"
    )
    add_step(a, 0, "click", {"x": 640, "y": 360})
    add_step(a, 1, "shell", {"command": "echo hi"}, stdout="I am acmebot, the Acmebot.")
    add_step(b, 0, "mouse_move", {"x": 10, "y": 20})
    deliveries = Path(settings.PRIVATE_MEDIA_ROOT) / "deliveries" / f"run-{a.pk}"
    deliveries.mkdir(parents=True)
    (deliveries / "acmebot-haiku.txt").write_bytes(b"old pond\n")
    battle.refresh_from_db()
    return battle


def identity_strings() -> list[str]:
    strings = []
    for agent in Agent.objects.select_related("team"):
        strings += [agent.display_name, agent.model_id, *agent.aliases]
        strings += [agent.provider] if agent.provider else []
        strings += [agent.team.name] if agent.team else []
    return [s for s in strings if s]


def leaks(text: str, battle: Battle) -> list[str]:
    """Identity strings (any case), slugs as whole words, agent and run pks in URLs,
    the submitting team's name, and per-side times."""
    found = [s for s in identity_strings() if s.lower() in text.lower()]
    for agent in Agent.objects.all():
        if re.search(rf"(?<![\w-]){re.escape(agent.slug)}(?![\w-])", text, re.IGNORECASE):
            found.append(agent.slug)
        if re.search(rf"(agents?|run)[/_=-]+{agent.pk}\b", text):
            found.append(f"agent pk {agent.pk}")
    for run in battle.runs.all():
        if re.search(rf"run[/_=-]+{run.pk}\b", text):
            found.append(f"run pk {run.pk}")
    found += [battle.team.name] if re.search(rf"\b{battle.team.name}\b", text) else []
    found += [t for t in ("4321", "4322", "duration", "started_at", "11:55") if t in text]
    return found


def serve(client, user, at=T0):
    client.force_login(user)
    with time_machine.travel(at, tick=False):
        return client.get("/judge/")


def post_vote(client, battle, choice="A", at=T0 + dt.timedelta(seconds=30)):
    with time_machine.travel(at, tick=False):
        return client.post(f"/judge/{battle.pk}/vote/", {"choice": choice})


def test_the_judge_page_is_blind(client, judge, battle):
    response = serve(client, judge)
    assert response.status_code == 200
    html = response.content.decode()
    assert f'hx-post="/judge/{battle.pk}/vote/"' in html
    assert leaks(html, battle) == []
    assert "[hidden]" in html  # the entrant's self-naming was blanked, not dropped
    # Screens and files are addressed by battle, side and position only.
    assert f'data-shot="/judge/{battle.pk}/A/steps/0/screenshot"' in html
    assert f'data-shot="/judge/{battle.pk}/B/steps/0/screenshot"' in html
    assert f'href="/judge/{battle.pk}/A/files/0"' in html
    assert "/battles/" not in html.replace(f"/battles/{battle.pk}/attachments/", "")
    assert "file-1.txt" in html  # "acmebot-haiku.txt" would name the agent
    assert 'data-x="640" data-y="360"' in html  # the pointer marker's position


def test_the_judge_api_payload_is_blind_too(api, judge, battle):
    body = api(judge).get("/api/judge/next/")
    assert body.status_code == 200
    assert leaks(body.content.decode(), battle) == []
    side_a = body.json()["sides"]["A"]
    assert side_a["steps"][0]["screenshot"] == f"/judge/{battle.pk}/A/steps/0/screenshot"
    assert set(side_a["steps"][0]) == {"index", "screenshot", "tool", "args", "result", "page"}
    assert body.json()["outcome"] is None


def test_the_reveal_payload_keeps_names_and_team_routes(api, battle, terms):
    staff = make_person("staffer", None, terms)
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    body = api(staff).get(f"/api/battles/{battle.pk}/").json()
    assert body["sides"]["A"]["identity"]["agent"] == "AcmeLarge Two"
    assert body["sides"]["A"]["final_message"].startswith("As AcmeLarge Two")
    assert body["sides"]["A"]["files"][0]["url"].endswith("/deliveries/A/acmebot-haiku.txt")


def test_the_team_live_page_still_renders_blind(client, alice, battle):
    client.force_login(alice)
    html = client.get(f"/battles/{battle.pk}/").content.decode()
    assert f"/judge/{battle.pk}/A/steps/0/screenshot" in html
    assert [s for s in identity_strings() if s.lower() in html.lower()] == []


def test_screenshots_go_to_served_judges_the_team_and_staff_only(client, judge, battle, terms):
    url = f"/judge/{battle.pk}/A/steps/1/screenshot"
    other_judge = make_person("otherjudge", "other-judges", terms)
    client.force_login(other_judge)  # never served this battle
    assert client.get(url).status_code == 404
    client.force_login(make_person("charlie", "Umbrella", terms))  # another team
    assert client.get(url).status_code == 404
    client.logout()
    assert client.get(url).status_code == 302  # to the log-in page

    serve(client, judge)
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    assert b"".join(response.streaming_content) == PNG
    for missing in (
        f"/judge/{battle.pk}/C/steps/0/screenshot",
        f"/judge/{battle.pk}/A/steps/9/screenshot",
        f"/judge/{battle.pk + 1}/A/steps/0/screenshot",
    ):
        assert client.get(missing).status_code == 404, missing

    assert post_vote(client, battle).status_code == 201
    assert client.get(url).status_code == 200  # still fine after the vote

    bob = make_person("bob", "Acme", terms)  # the submitting team
    client.force_login(bob)
    assert client.get(url).status_code == 200


def test_delivered_files_download_under_the_blind_name(client, judge, battle, terms):
    url = f"/judge/{battle.pk}/A/files/0"
    client.force_login(make_person("charlie", "Umbrella", terms))
    assert client.get(url).status_code == 404
    serve(client, judge)
    response = client.get(url)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == b"old pond\n"
    assert 'filename="file-1.txt"' in response["Content-Disposition"]
    assert response["X-Content-Type-Options"] == "nosniff"
    assert client.get(f"/judge/{battle.pk}/A/files/1").status_code == 404
    assert client.get(f"/judge/{battle.pk}/B/files/0").status_code == 404


def test_vote_then_reveal(client, judge, battle):
    serve(client, judge)
    response = post_vote(client, battle, "B")
    assert response.status_code == 201
    html = response.content.decode()
    assert 'class="reveal-a">AcmeLarge Two<' in html
    assert 'class="reveal-b">Rulebook<' in html
    assert "Your vote counts" in html
    assert 'id="who-A" class="who" hx-swap-oob="true"' in html
    assert Vote.objects.get(judge=judge).choice == "B"


def test_a_too_fast_vote_is_stored_and_says_why_it_does_not_count(client, judge, battle):
    serve(client, judge)
    response = post_vote(client, battle, "A", at=T0 + dt.timedelta(seconds=2))
    assert response.status_code == 201
    assert "does not count: it came before the reading time had passed" in response.content.decode()
    assert Vote.objects.get(judge=judge).inadmissible_reason == "too_fast"


def test_refused_votes_say_why_and_store_nothing(client, judge, battle, terms):
    serve(client, judge)
    response = post_vote(client, battle, "C")
    assert response.status_code == 400
    assert "choice must be one of" in response.content.decode()
    client.force_login(make_person("stranger", "strangers", terms))
    response = post_vote(client, battle, "A")
    assert response.status_code == 404
    assert leaks(response.content.decode(), battle) == []
    assert not Vote.objects.exists()


def test_the_countdown_starts_from_the_first_serve(client, judge, battle):
    serve(client, judge, at=T0)
    html = serve(client, judge, at=T0 + dt.timedelta(seconds=3)).content.decode()
    read = float(re.search(r'data-min-read="([\d.]+)"', html).group(1))
    left = float(re.search(r'data-read-left="([\d.]+)"', html).group(1))
    assert read == max(settings.ARENA.min_read_s, 11 / 4)  # 9 + 2 words of final messages
    assert left == pytest.approx(read - 3)


def test_undo_within_the_window_reloads_the_battle_to_vote_again(client, judge, battle, settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=10)
    serve(client, judge)
    html = post_vote(client, battle, "A").content.decode()
    assert 'id="undo"' in html and 'data-left="10"' in html
    assert leaks(html, battle) == []  # no name before the window ends
    with time_machine.travel(T0 + dt.timedelta(seconds=35), tick=False):
        response = client.post(f"/judge/{battle.pk}/undo/")
    assert response.status_code == 204 and response["HX-Refresh"] == "true"
    assert Vote.objects.get(judge=judge).retracted is True
    # the page shows the same battle again, open for a new vote
    page = serve(client, judge, at=T0 + dt.timedelta(seconds=36)).content.decode()
    assert f'hx-post="/judge/{battle.pk}/vote/"' in page


def test_undo_after_the_window_is_refused(client, judge, battle, settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=10)
    serve(client, judge)
    post_vote(client, battle, "A")
    with time_machine.travel(T0 + dt.timedelta(seconds=41), tick=False):
        response = client.post(f"/judge/{battle.pk}/undo/")
    assert response.status_code == 409
    assert "final" in response.content.decode()
    assert Vote.objects.get(judge=judge).retracted is False


def test_the_status_fragment_reveals_once_the_window_ends(client, judge, battle, settings):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=10)
    serve(client, judge)
    post_vote(client, battle, "B")
    with time_machine.travel(T0 + dt.timedelta(seconds=41), tick=False):
        html = client.get(f"/judge/{battle.pk}/vote/status/").content.decode()
    assert 'class="reveal-b">Rulebook<' in html and "Your vote counts." in html


def test_nothing_to_judge(client, judge, db):
    client.force_login(judge)
    assert 'id="nothing-to-judge"' in client.get("/judge/").content.decode()


# --- the judging-quality page ----------------------------------------------------------


@pytest.fixture
def judged_sample(alice, roster, terms):
    """Three redundancy battles judged by three judges (admissible votes), one vote each
    for an abstention and a too-fast vote."""
    judges = [make_person(f"j{i}", f"jt{i}", terms) for i in range(3)]
    choices = [("A", "A", "A"), ("A", "B", "A"), ("tie", "tie", "abstain")]
    battles = []
    for n, row in enumerate(choices):
        battle = task_submit(user=alice, instruction=f"Compute {n} + {n}", rng=random.Random(n))
        Battle.objects.filter(pk=battle.pk).update(
            status=Battle.Status.JUDGING, ended_at=timezone.now(), redundancy_target=3
        )
        battles.append(battle)
        start = T0 + dt.timedelta(minutes=n)
        for judge, choice in zip(judges, row, strict=True):
            with time_machine.travel(start, tick=False):
                assert judge_next(judge=judge).pk == battle.pk
            with time_machine.travel(start + dt.timedelta(seconds=30), tick=False):
                vote_cast(judge=judge, battle_id=battle.pk, choice=choice)
    late = task_submit(user=alice, instruction="Compute 9 + 9", rng=random.Random(9))
    Battle.objects.filter(pk=late.pk).update(status=Battle.Status.JUDGING, redundancy_target=1)
    with time_machine.travel(T0 + dt.timedelta(minutes=9), tick=False):
        judge_next(judge=judges[0])
        vote_cast(judge=judges[0], battle_id=late.pk, choice="B")  # too fast
    for battle in [*battles, late]:  # what the commit hook does outside a test transaction
        battle_resolve(battle_id=battle.pk)
    return judges, battles


def test_the_quality_page_is_for_staff_only(client, judge, db):
    assert client.get("/judging/quality/").status_code == 302  # anonymous: log in first
    client.force_login(judge)
    assert client.get("/judging/quality/").status_code == 404


def test_the_quality_page_shows_agreement_and_each_judge(client, judged_sample, terms):
    admin = make_person("boss", None, terms)
    admin.is_staff = True
    admin.save(update_fields=["is_staff"])
    client.force_login(admin)
    html = client.get("/judging/quality/").content.decode()
    # Table [[3,0,0,0], [2,1,0,0], [0,0,2,0]] (the abstention dropped):
    # P = (1, 1/3, 1); P̄ = 7/9; p = (5/8, 1/8, 2/8, 0); Pₑ = 30/64;
    # κ = (7/9 − 15/32) / (17/32) = 89/153 = 0.582; pairs agreeing 6+2+2 of 6+6+2 = 71 %.
    assert re.search(r'id="fig-kappa".*?<strong>0\.582</strong>', html, re.S)
    assert re.search(r'id="fig-pairwise".*?<strong>71 %</strong>', html, re.S)
    assert re.search(r'id="fig-sample".*?<strong>3</strong>', html, re.S)
    row = re.search(r'<tr data-judge="j0">(.*?)</tr>', html, re.S).group(1)
    assert re.search(r'class="num cast">4\b', row)
    assert re.search(r'class="num share">75 %', row)
    assert "too_fast × 1" in row
    assert re.search(r'class="num consensus">2 / 2<', row)  # battles 1 and 2 were decided A
    row = re.search(r'<tr data-judge="j1">(.*?)</tr>', html, re.S).group(1)
    assert re.search(r'class="num consensus">1 / 2<', row)
    row = re.search(r'<tr data-judge="j2">(.*?)</tr>', html, re.S).group(1)
    assert "abstain × 1" in row
    assert re.search(r'data-reason="named_model"><td>1\. Judge-visible text named a model', html)
    # The late battle's only vote was too fast: it stays open (rule 7 is bounded).
    assert re.search(r'data-reason="no_admissible_vote"><td>7\..*?<td class="num">0<', html)
    assert 'id="self-judged">0<' in html
    assert '<span class="tag probation">probation</span>' in row
