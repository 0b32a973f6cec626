"""The export consent check (environments.consent): a run's task may be exported only
when its submitter has accepted the current consent terms (SPEC §2)."""

import random

import pytest

from accounts.models import Consent, ConsentTerms
from accounts.services import consent_accept, consent_terms_publish
from battles.models import Run, Task
from battles.services import task_submit
from environments.consent import ExportConsent, run_export_consent, task_export_consent
from tests.conftest import make_person


@pytest.fixture
def battle(alice, roster):
    """A battle alice submitted (she accepted terms v1 on sign-up), with its two runs."""
    battle = task_submit(
        user=alice, instruction="sort the numbers in data.csv into out.csv", rng=random.Random(1)
    )
    assert battle.runs.count() == 2
    return battle


def test_a_consented_submitters_run_may_be_exported(battle):
    run = battle.runs.get(side="A")

    assert run_export_consent(run) == ExportConsent(True)


def test_a_submitter_who_never_consented_blocks_the_export(battle, terms):
    dana = make_person("dana", "Dana's team", terms=None)
    Task.objects.filter(pk=battle.task_id).update(submitter=dana)

    verdict = run_export_consent(battle.runs.get(side="B"))

    assert (verdict.exportable, verdict.reason) == (False, "never_consented")
    assert verdict.message == "The task's submitter has never accepted the consent terms."


def test_consent_to_an_old_version_blocks_the_export(battle):
    consent_terms_publish(text="v2: exported environments are published too.")

    verdict = run_export_consent(battle.runs.get(side="A"))

    assert (verdict.exportable, verdict.reason) == (False, "stale_consent")
    assert verdict.message == (
        "The task's submitter accepted version 1 of the consent terms; the current version is 2."
    )


def test_accepting_the_new_version_allows_the_export_again(battle, alice):
    new = consent_terms_publish(text="v2: exported environments are published too.")
    consent_accept(user=alice, terms=new)

    assert run_export_consent(battle.runs.get(side="A")) == ExportConsent(True)


def test_another_users_consent_does_not_count(battle, charlie):
    new = consent_terms_publish(text="v2")
    consent_accept(user=charlie, terms=new)

    assert run_export_consent(battle.runs.get(side="A")).reason == "stale_consent"


def test_with_no_terms_published_nothing_is_exportable(db):
    dana = make_person("dana", "Dana's team", terms=None)
    task = Task.objects.create(
        team=dana.memberships.get().team, submitter=dana, instruction="list the files"
    )
    assert not ConsentTerms.objects.exists() and not Consent.objects.exists()

    verdict = task_export_consent(task)

    assert (verdict.exportable, verdict.reason) == (False, "no_terms")


def test_a_run_without_a_submitted_task_is_not_exportable(battle):
    lane = Run.objects.create(
        for_evaluation=True, side="A", agent=battle.agent_a, step_budget=10, wall_budget_s=60
    )

    verdict = run_export_consent(lane)

    assert (verdict.exportable, verdict.reason) == (False, "no_submitted_task")


def test_the_check_reads_three_rows_at_most(battle, django_assert_max_num_queries):
    run = battle.runs.get(side="A")

    with django_assert_max_num_queries(3):
        run_export_consent(run)
