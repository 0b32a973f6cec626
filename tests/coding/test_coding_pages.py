"""A coding battle on the judge's page and the live battle page, blind: both diffs file by
file, highlighted and escaped, what the judge sandbox measured beside them, the agents'
steps; the battle page's phases with their status and time, moving live over the
battle's socket as phase rows are written."""

import re

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.test import Client

from battles.coding_models import CodingPhase
from battles.models import Battle
from battles.services.coding_phases import phase
from tests.battles.test_consumers import communicator, session_cookie
from tests.coding.page_factories import coding_battle

pytestmark = pytest.mark.django_db(transaction=True)


def page_of(user, path: str) -> str:
    client = Client()
    client.force_login(user)
    response = client.get(path)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


# page_factories' usage and the scores made from it, as a page would print them
BLIND_FIGURES = ("4500", "1200", "0.0123", "0.98", "0.93", "Cost efficiency</th>",
                 "Composite</th>", 'class="tokens', 'class="cost')  # fmt: skip


def identities(battle) -> list[str]:
    names = ["claude-json", "source"]  # the usage's source names the CLI
    for agent in (battle.agent_a, battle.agent_b):
        names += [agent.display_name, agent.slug, agent.model_id, *agent.aliases]
    return [n for n in names if n]


def test_the_judge_sees_both_diffs_highlighted_with_the_results_and_no_identity(
    alice, judge, roster
):
    battle = coding_battle(alice)

    html = page_of(judge, "/judge/")

    assert f'hx-post="/judge/{battle.pk}/vote/"' in html
    assert 'class="judge coding"' in html and "battles/coding.css" in html
    side_a = html[html.index('id="coding-A"') : html.index('id="coding-B"')]
    side_b = html[html.index('id="coding-B"') :]
    # Side A's diff: calc.py, Python highlighted, the agent's markup escaped.
    assert '<code class="path">calc.py</code>' in side_a
    assert (
        '<div class="dl del"><span class="dm">−</span>    <span class="tk-k">return</span>'
        in side_a
    )
    assert "# fixed &lt;script&gt;alert(1)&lt;/script&gt;" in side_a
    assert "<script>alert(1)" not in html
    # Side B's diff: a new Markdown file; "-- looked" is an added line.
    assert '<code class="path">NOTES.md</code>' in side_b and "new file mode 100644" in side_b
    assert '<span class="dm">+</span>' in side_b and "-- looked at calc.py only" in side_b
    # The judge sandbox's results beside each diff.
    assert "Git apply" in side_a
    # (records of plain commands: their own exit code and counts, marked as such)
    assert "passed</span> (exit code 0, as the command reports it) in 0.4 s" in side_a
    assert "failed</span> (exit code 1, as the command reports it)" in side_b
    assert "2 of 2 passed (as the command reports it)" in side_a
    assert "1 of 2 passed (as the command reports it)" in side_b
    assert "2 → 1 on 1 changed Python file" in side_a
    assert "1.00 → 1.50 (highest 1 → 2)" in side_a
    assert "Lint</th><td>0.90</td>" in side_a and "Directness</th><td>0.60</td>" in side_a
    # No tokens, no cost and no score made from the cost (cost efficiency 0.98, the
    # composite 0.93 that contains it): they show with the names.
    assert not [figure for figure in BLIND_FIGURES if figure in html]
    assert "show with the names" in side_a
    # The agents' steps, as for any battle.
    assert "sed -i s/-/+/ calc.py" in html and "cat calc.py" in html
    # Nothing names the agents, their models or the CLI that reported the usage.
    lowered = html.lower()
    assert [n for n in identities(battle) if n.lower() in lowered] == []


def test_tokens_cost_and_the_scores_made_from_the_cost_show_with_the_names(
    alice, api, judge, roster
):
    battle = coding_battle(alice)
    team_page = page_of(alice, f"/battles/{battle.pk}/")
    served = api(judge).get("/api/judge/next/")
    assert served.status_code == 200 and served.json()["id"] == battle.pk
    # Before: neither the team's live page nor the judge's API payload has them
    assert not [f for f in BLIND_FIGURES if f in team_page]
    assert 'id="coding-usage"' not in team_page
    assert not [f for f in BLIND_FIGURES if f in served.content.decode()]

    # Once the battle is decided, the team's page shows them beside the names
    Battle.objects.filter(pk=battle.pk).update(status="decided", outcome="A")
    html = page_of(alice, f"/battles/{battle.pk}/")

    usage = html[
        html.index('id="coding-usage"') : html.index("</table>", html.index('id="coding-usage"'))
    ]
    assert 'id="battle-reveal"' in html and battle.agent_a.display_name in html
    for side, composite in (("A", "0.93"), ("B", "0.00")):
        row = usage[usage.index(f'data-side="{side}"') :]
        assert re.match(
            rf'data-side="{side}"><th scope="row">{side}</th>\s*<td class="tokens-in">4500</td>'
            rf"<td>240</td><td>1200</td><td>0</td>\s*<td class=\"cost\">\$0.0123</td>\s*"
            rf'<td>0.98</td>\s*<td class="composite">{composite}</td>',
            row,
        ), row[:400]


def test_a_name_in_a_diff_or_in_test_output_is_blanked_for_the_judge(alice, judge, roster):
    # (Screening excludes such a battle; the page's redaction is the second line.)
    named = "diff --git a/x.py b/x.py\n+++ b/x.py\n@@ -0,0 +1 @@\n+# written by Surveyor\n"
    coding_battle(alice, diffs=(named, named), outputs=("Rulebook says 1 passed", ""))

    html = page_of(judge, "/judge/")

    assert "written by [hidden]" in html and "[hidden] says 1 passed" in html
    assert "Surveyor" not in html and "Rulebook" not in html


def test_the_battle_page_shows_each_phase_with_its_status_and_time(alice, roster):
    battle = coding_battle(alice)

    html = page_of(alice, f"/battles/{battle.pk}/")

    def timed(html: str) -> list[tuple[str, str, str, str]]:
        return re.findall(
            r'<tr data-phase="([^"]+)" data-side="([AB]?)" data-status="(\w+)">'
            r"<td>[^<]*</td><td>[^<]*</td><td>.*?</td><td>([\d.]+) s</td>",
            html,
        )

    # While votes can count, an agent's own phases show no time (it could tell them
    # apart); the shared phases and the judge's checks do.
    rows = timed(html)
    assert rows[0] == ("clone", "", "ok", "2.5")
    assert not any(name.startswith(("agent", "diff", "destroy")) for name, *_ in rows)
    assert 'data-phase="agent A" data-side="A" data-status="ok"' in html
    # Once decided, every phase has its time.
    Battle.objects.filter(pk=battle.pk).update(status="decided")
    rows = timed(page_of(alice, f"/battles/{battle.pk}/"))
    assert rows[:3] == [("clone", "", "ok", "2.5"), ("agent A", "A", "ok", "2.5"),
                        ("agent B", "B", "ok", "2.5")]  # fmt: skip
    assert [name for name, *_ in rows][-4:] == [
        "apply", "success command", "tests", "lint and complexity"
    ]  # fmt: skip
    assert 'id="coding-A"' in html and 'id="coding-B"' in html


def test_phases_move_live_on_the_battle_socket(alice, bob, roster):
    battle = coding_battle(alice, status="running")
    CodingPhase.objects.filter(battle=battle).delete()
    cookie = session_cookie(bob)

    def phase_rows(html: str) -> list[tuple[str, str]]:
        return re.findall(r'data-phase="([^"]+)" data-side="[AB]?" data-status="(\w+)"', html)

    async def scenario() -> list[str]:
        socket = communicator(battle.pk, cookie)
        connected, _ = await socket.connect()
        assert connected
        frames = [await socket.receive_from(timeout=5)]

        def clone() -> None:
            with phase(battle.pk, "clone") as said:
                said.detail = "42 files"

        await database_sync_to_async(clone)()
        frames += [await socket.receive_from(timeout=5) for _ in range(2)]
        await socket.disconnect()
        return frames

    first, started, ended = async_to_sync(scenario)()

    assert "No phase has started yet." in first
    assert phase_rows(started) == [("clone", "running")] and "running…" in started
    assert phase_rows(ended) == [("clone", "ok")] and "42 files" in ended


def test_a_battle_that_is_not_a_coding_battle_has_no_coding_section(alice, judge, roster):
    from tests.judging.battle_factories import ended_battle

    ended_battle(alice)

    html = page_of(judge, "/judge/")

    assert 'class="judge"' in html and 'id="coding"' not in html and "coding.css" not in html
