"""The new-evaluation form's baseline field (baseline-anchored judging) on real
PostgreSQL and Redis: the page offers it with the candidates' agents, a baseline posted
with the form becomes the evaluation's, and each refusal of the services is shown beside
the field in the page's words, with nothing created or queued."""

import re

import django_rq
import pytest

from evals import tournaments
from evals.models import Evaluation
from tests.evals.test_pages import acme, form_data, signed_in, text_of

pytestmark = pytest.mark.django_db

LABEL = "Baseline agent every other candidate plays"


def baseline_form(**change) -> dict:
    """Three candidates, the judge, alpha as the baseline; no rubric, no pairs."""
    return form_data(**{"rubric": None, "pairwise": None, "baseline": "alpha", **change})


def field_text(html: str, name: str) -> str:
    """The words of one field's block on the page (label, help, errors)."""
    block = re.search(rf'<div class="field" id="field-{name}">(.*?)</div>', html, re.S)
    assert block, f"no field {name} on the page"
    return text_of(block.group(1).replace("&#x27;", "'"))


def test_the_page_offers_a_baseline_among_the_candidates_agents(alice, arena_agents):
    html = signed_in(alice).get("/evaluations/").content.decode()
    assert f'<label for="id_baseline">{LABEL}:</label>' in html
    select = re.search(r'<select name="baseline"[^>]*>(.*?)</select>', html, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"', select) == ["", "alpha", "beta", "gamma", "judge"]
    assert "No baseline (every pair, or no pairwise judging)" in select
    words = field_text(html, "baseline")
    assert "each other candidate is judged against this one on every task" in words
    assert "Needs a judge" in words
    # among the judging fields: after the judge and the pairs, before the replies' length
    order = [html.index(f'id="field-{name}"') for name in ("judge", "pairwise", "baseline")]
    assert order == sorted(order) and order[-1] < html.index('id="field-max_tokens"')


def test_a_baseline_posted_with_the_form_is_the_evaluations(
    alice, arena_agents, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(alice).post("/evaluations/", baseline_form(baseline="beta"))
    evaluation = Evaluation.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/evaluations/{evaluation.pk}/"
    assert (evaluation.baseline.slug, evaluation.judge.slug, evaluation.pairwise) == (
        "beta", "judge", False,
    )  # fmt: skip
    assert [c.agent.slug for c in evaluation.candidates.select_related("agent")] == [
        "alpha", "beta", "gamma",
    ]  # fmt: skip
    assert django_rq.get_queue("evals").count == 1


def test_a_blank_baseline_is_none(alice, arena_agents):
    response = signed_in(alice).post("/evaluations/", baseline_form(baseline=""))
    assert response.status_code == 302
    assert Evaluation.objects.get().baseline is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"agents": ["alpha", "beta"], "baseline": "gamma"},
         "The baseline agent must be one of the ticked candidates"),
        ({"judge": ""}, "A baseline needs a judge: choose one above, or no baseline."),
        ({"tournament": tournaments.ROUND_ROBIN},
         "choose a baseline or a tournament format, not both."),
        ({"pairwise": "on"}, "untick judging every pair of replies, or choose no baseline."),
        ({"agents": ["alpha"]}, "A baseline needs another ticked candidate to play against it."),
    ],
)  # fmt: skip
def test_a_refused_baseline_is_said_beside_the_field_in_plain_words(
    alice, arena_agents, change, says
):
    response = signed_in(alice).post("/evaluations/", baseline_form(**change))
    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="eval-refused"' in html
    assert "see the fields marked below" in text_of(html)
    words = field_text(html, "baseline")
    assert says in words
    assert "--" not in words and "_" not in words  # not the command's options nor a code
    assert Evaluation.objects.count() == 0 and acme().suites.count() == 0
    assert django_rq.get_queue("evals").count == 0


def test_a_baseline_that_is_no_agent_offered_is_refused_by_the_form(alice, arena_agents):
    response = signed_in(alice).post("/evaluations/", baseline_form(baseline="nobody"))
    assert response.status_code == 400
    assert "Select a valid choice. nobody is not one of the available choices." in field_text(
        response.content.decode(), "baseline"
    )
    assert Evaluation.objects.count() == 0


def test_a_refusal_about_another_field_keeps_the_services_words(alice, arena_agents):
    """Without a baseline, a rubric without a judge says the service's reason, as before."""
    response = signed_in(alice).post(
        "/evaluations/", form_data(judge="", pairwise=None, baseline="")
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "a rubric or pairwise judging needs --judge" in text_of(html)
    assert 'class="error field-error"' not in html
    assert Evaluation.objects.count() == 0
