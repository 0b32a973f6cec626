"""A battle's page says where the battle stands and how it ended, in words
(battles.verdict): every status, every outcome and exclusion reason, every run ending."""

import pytest

from battles.models import Battle, Run
from battles.verdict import END_REASON_WORDS, battle_verdict, end_reason_words


@pytest.mark.parametrize(
    ("fields", "tone", "headline", "detail_has"),
    [
        ({"status": "queued"}, "waiting", "Waiting to start.", "sandboxes are free"),
        ({"status": "running"}, "waiting", "Running.", "working on the task"),
        ({"status": "screening"}, "waiting", "Both sides have finished.", "names an agent"),
        ({"status": "judging"}, "open", "Waiting for judges.", "without knowing who"),
        ({"status": "decided", "outcome": "A", "decision_source": "crowd"}, "decided",
         "Side A did the task better.", "independent judges"),
        ({"status": "decided", "outcome": "B", "decision_source": "crowd"}, "decided",
         "Side B did the task better.", "counts for the ratings"),
        ({"status": "decided", "outcome": "tie", "decision_source": "submitter"}, "decided",
         "A tie: both sides did the task about equally well.", "self-judged"),
        ({"status": "decided", "outcome": "both_bad", "decision_source": "import"}, "decided",
         "Both sides did the task badly.", "imported"),
        ({"status": "excluded", "exclusion_reason": "ended_by_submitter"}, "excluded",
         "Excluded from the ratings.", "Reason: the submitter ended one side early."),
        ({"status": "excluded", "exclusion_reason": "named_model"}, "excluded",
         "Excluded from the ratings.", "Reason: judge-visible text named a model."),
        ({"status": "excluded"}, "excluded", "Excluded from the ratings.", "no reason recorded"),
        ({"status": "failed", "failure_reason": "the sandbox died"}, "failed",
         "The battle failed.", "counts for neither agent"),
    ],
)  # fmt: skip
def test_the_verdict_in_words(fields, tone, headline, detail_has):
    verdict = battle_verdict(Battle(**fields))
    assert (verdict.tone, verdict.headline) == (tone, headline)
    assert detail_has in verdict.detail


def test_every_status_and_exclusion_reason_has_words():
    for status in Battle.Status.values:
        verdict = battle_verdict(Battle(status=status, outcome="A", decision_source="crowd"))
        assert verdict.headline and "_" not in verdict.headline + verdict.detail, status
    for reason in Battle.ExclusionReason.values:
        detail = battle_verdict(Battle(status="excluded", exclusion_reason=reason)).detail
        assert reason not in detail and "_" not in detail, reason


def test_every_run_ending_has_words():
    assert set(END_REASON_WORDS) == set(Run.EndReason.values)
    assert end_reason_words("step_budget") == "ran out of steps"
    assert end_reason_words("ended_by_submitter") == "was ended early by the submitter"
    assert end_reason_words("something_new") == "something new"  # unknown: still readable
