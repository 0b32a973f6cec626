"""Whether a run's task may be exported as a training environment: its submitter has
accepted the current publication consent terms (SPEC §2). A read; it writes nothing.

Stricter than admission in two ways: with no terms published nothing is exportable
(admission lets everyone through then, ``accounts.selectors.consent_is_current``), and
only a battle's task, which a person submitted, can be exported at all (a test drive's
sample and an evaluation's suite task are the arena's own)."""

from dataclasses import dataclass

from accounts.models import Consent, ConsentTerms
from battles.models import Run, Task


@dataclass(frozen=True)
class ExportConsent:
    """``reason`` is empty when ``exportable``; else one of "no_submitted_task",
    "no_terms", "never_consented", "stale_consent", with ``message`` for a person."""

    exportable: bool
    reason: str = ""
    message: str = ""


def run_export_consent(run: Run) -> ExportConsent:
    if run.battle_id is None:
        return ExportConsent(
            False,
            "no_submitted_task",
            "Only a battle's run has a submitted task; this run's task is the arena's own.",
        )
    task = Task.objects.only("submitter_id").get(battles__pk=run.battle_id)
    return task_export_consent(task)


def task_export_consent(task: Task) -> ExportConsent:
    current = ConsentTerms.objects.order_by("-version").only("pk", "version").first()
    if current is None:
        return ExportConsent(
            False, "no_terms", "No consent terms are published: nobody has agreed to export."
        )
    accepted = (
        Consent.objects.filter(user_id=task.submitter_id)
        .order_by("-terms__version")
        .values_list("terms__version", flat=True)
        .first()
    )
    if accepted is None:
        return ExportConsent(
            False, "never_consented", "The task's submitter has never accepted the consent terms."
        )
    if accepted != current.version:
        return ExportConsent(
            False,
            "stale_consent",
            f"The task's submitter accepted version {accepted} of the consent terms; "
            f"the current version is {current.version}.",
        )
    return ExportConsent(True)
