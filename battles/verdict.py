"""What a battle's page says, in words, about where the battle stands and how it ended:
its outcome (once decided, when it is public), why it was excluded or failed, and how
each side's run ended. Plain data for templates; no identities (the caller adds those
for the people who may see them)."""

from dataclasses import dataclass

from battles.models import Battle, Run

# How a run ended, as a sentence fragment after "Side A …".
END_REASON_WORDS = {
    Run.EndReason.DELIVERED: "finished and delivered its answer",
    Run.EndReason.GAVE_UP: "gave up",
    Run.EndReason.STEP_BUDGET: "ran out of steps",
    Run.EndReason.TIME_BUDGET: "ran out of time",
    Run.EndReason.ERROR: "stopped on an error",
    Run.EndReason.ENDED_BY_SUBMITTER: "was ended early by the submitter",
}

OUTCOME_WORDS = {
    Battle.Outcome.A: "Side A did the task better.",
    Battle.Outcome.B: "Side B did the task better.",
    Battle.Outcome.TIE: "A tie: both sides did the task about equally well.",
    Battle.Outcome.BOTH_BAD: "Both sides did the task badly.",
}

DECIDED_BY_WORDS = {
    Battle.DecisionSource.CROWD: "Decided by independent judges; it counts for the ratings.",
    Battle.DecisionSource.SUBMITTER: (
        "Decided by the submitting team's own votes only (no independent judge's vote "
        "counted): published as self-judged, apart from the judged ratings."
    ),
    Battle.DecisionSource.IMPORT: "Decided by an imported historical judgment.",
}


@dataclass(frozen=True)
class Verdict:
    tone: str  # "waiting" | "open" | "decided" | "excluded" | "failed": a CSS class
    headline: str
    detail: str = ""


def end_reason_words(reason: str) -> str:
    return END_REASON_WORDS.get(reason, reason.replace("_", " "))


def battle_verdict(battle: Battle) -> Verdict:
    """Where the battle stands, as a headline and a sentence of detail."""
    status = battle.status
    if status == Battle.Status.QUEUED:
        return Verdict(
            "waiting", "Waiting to start.", "Both agents start as soon as two sandboxes are free."
        )
    if status == Battle.Status.RUNNING:
        return Verdict(
            "waiting",
            "Running.",
            "Both agents are working on the task now; their steps appear below as they take them.",
        )
    if status == Battle.Status.SCREENING:
        return Verdict(
            "waiting",
            "Both sides have finished.",
            "Their output is being checked for anything that names an agent before judges see it.",
        )
    if status == Battle.Status.JUDGING:
        return Verdict(
            "open",
            "Waiting for judges.",
            "Judges compare the two sides without knowing who they are; the result shows "
            "here once they have decided.",
        )
    if status == Battle.Status.DECIDED:
        headline = OUTCOME_WORDS.get(battle.outcome, "Decided.")
        return Verdict("decided", headline, DECIDED_BY_WORDS.get(battle.decision_source, ""))
    if status == Battle.Status.EXCLUDED:
        reason = (
            battle.get_exclusion_reason_display()
            if battle.exclusion_reason
            else "no reason recorded"
        )
        return Verdict(
            "excluded",
            "Excluded from the ratings.",
            f"Reason: {reason}. The battle counts for neither agent.",
        )
    if status == Battle.Status.FAILED:  # the page shows the failure's reason above
        return Verdict("failed", "The battle failed.", "It counts for neither agent.")
    return Verdict("waiting", status.capitalize() + ".")
