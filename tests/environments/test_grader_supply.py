"""An operator supplies the grader of an environment that awaits one (``needs_grader``,
docs/environments.md): the service (``environments.review.environment_grader_supply``)
and the admin's form. Real PostgreSQL and Redis: the validation job is looked for on
the battles queue."""

import html
import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from arena_site.exceptions import ApplicationError
from arena_site.redis import queue
from environments.models import Environment
from environments.review import environment_grader_supply
from tests.environments.environment_factories import GRADER, environment, source_battle
from tests.ratings.factories import judges

Status = Environment.Status
SUPPLIED = {
    "version": 1,
    "checks": [
        {"type": "file_exists", "path": "out.csv"},
        {"type": "command", "run": "test -s out.csv"},
        {"type": "file_sha256", "path": "out.csv", "sha256": "AB" * 32},
    ],
}


def validation_job(pk: int):
    return queue("battles").fetch_job(f"environment-validate-{pk}")


@pytest.fixture
def battle(alice, roster):
    return source_battle(alice, roster, judges(1)[0], days=30)


@pytest.fixture
def awaiting(battle):
    """A needs_grader environment with a reference run and a state, no draft grader."""
    return environment(battle, status=Status.NEEDS_GRADER, grader=None)


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_superuser("root", password="correct horse battery")


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def unchanged(env: Environment) -> None:
    grader = env.grader
    env.refresh_from_db()
    assert (env.status, env.grader) == (Status.NEEDS_GRADER, grader)
    assert validation_job(env.pk) is None


# -- the service --------------------------------------------------------------------------


def test_a_supplied_grader_grades_the_environment_and_enqueues_its_validation(
    awaiting, staff, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        returned = environment_grader_supply(
            environment_id=awaiting.pk, grader=SUPPLIED, actor=staff
        )
        assert validation_job(awaiting.pk) is None  # only once the transaction commits

    awaiting.refresh_from_db()
    assert awaiting.status == returned.status == Status.GRADED
    assert awaiting.status_detail == "grader supplied by root"
    # Normalised by grader_validate: defaults filled, the hash in lower case.
    assert awaiting.grader["checks"][1] == {
        "type": "command", "run": "test -s out.csv", "cwd": "", "timeout_s": 120, "expect_exit": 0,
    }  # fmt: skip
    assert awaiting.grader["checks"][2]["sha256"] == "ab" * 32
    job = validation_job(awaiting.pk)
    assert job is not None
    assert job.func_name == "environments.jobs.environment_validate_job"
    assert list(job.args) == [awaiting.pk]
    assert job.origin == "battles"


def test_only_an_environment_awaiting_a_grader_takes_one(battle, staff):
    validated = environment(battle)

    with pytest.raises(ApplicationError) as refused:
        environment_grader_supply(environment_id=validated.pk, grader=SUPPLIED, actor=staff)

    assert refused.value.code == "not_awaiting_grader"
    assert "validated" in refused.value.message
    validated.refresh_from_db()
    assert (validated.status, validated.grader) == (Status.VALIDATED, GRADER)
    assert validation_job(validated.pk) is None


def test_an_unknown_environment_is_not_found(db, staff):
    with pytest.raises(ApplicationError) as refused:
        environment_grader_supply(environment_id=987654, grader=SUPPLIED, actor=staff)

    assert (refused.value.code, refused.value.status) == ("not_found", 404)


@pytest.mark.parametrize("missing", ["reference_run", "state"])
def test_without_a_reference_a_grader_alone_cannot_validate(awaiting, staff, missing):
    Environment.objects.filter(pk=awaiting.pk).update(**{missing: None})
    awaiting.refresh_from_db()

    with pytest.raises(ApplicationError) as refused:
        environment_grader_supply(environment_id=awaiting.pk, grader=SUPPLIED, actor=staff)

    assert refused.value.code == "no_reference"
    assert "a grader alone cannot validate it" in refused.value.message
    assert "Reject it instead" in refused.value.message
    unchanged(awaiting)


def _checks(*checks) -> dict:
    return {"version": 1, "checks": list(checks)}


HOSTILE = {
    "absolute path": (
        _checks({"type": "file_exists", "path": "/etc/passwd"}),
        "check 1 (file_exists): path '/etc/passwd' is absolute",
    ),
    "climbs out": (
        _checks(
            {"type": "file_exists", "path": "out.csv"},
            {"type": "file_sha256", "path": "repo/../../etc/shadow", "sha256": "0" * 64},
        ),
        "check 2 (file_sha256): path 'repo/../../etc/shadow' climbs out with '..'",
    ),
    "unknown type": (
        _checks({"type": "python", "code": "import os; os.system('id')"}),
        "check 1 has unknown type 'python'",
    ),
    "51 checks": (
        _checks(*[{"type": "file_exists", "path": f"f{i}"} for i in range(51)]),
        "a grader has at most 50 checks; this one 51",
    ),
    "no checks": (_checks(), "a grader needs a non-empty list of checks"),
    "not an object": ([], "a grader is an object"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_grader_is_refused_with_the_validators_message(awaiting, staff, case):
    grader, message = HOSTILE[case]

    with pytest.raises(ApplicationError) as refused:
        environment_grader_supply(environment_id=awaiting.pk, grader=grader, actor=staff)

    assert refused.value.code == "invalid_grader"
    assert refused.value.message.startswith(message)
    unchanged(awaiting)


# -- the admin ----------------------------------------------------------------------------


def grader_url(env: Environment) -> str:
    return f"/admin/environments/environment/{env.pk}/grader/"


def test_the_change_page_links_to_the_grader_form_only_when_one_is_awaited(awaiting, battle, staff):
    client = client_for(staff)

    page = client.get(f"/admin/environments/environment/{awaiting.pk}/change/").content.decode()
    assert f'<a href="{grader_url(awaiting)}">Supply a grader…</a>' in page

    Environment.objects.filter(pk=awaiting.pk).update(reference_run=None)
    page = client.get(f"/admin/environments/environment/{awaiting.pk}/change/").content.decode()
    assert "Supply a grader…" not in page
    assert "a grader alone cannot validate it" in page

    Environment.objects.filter(pk=awaiting.pk).update(status=Status.INVALID)
    page = client.get(f"/admin/environments/environment/{awaiting.pk}/change/").content.decode()
    assert "Supply a grader" not in page
    assert "a grader alone" not in page


def test_the_form_starts_from_the_draft_grader_or_an_empty_one(awaiting, staff):
    client = client_for(staff)

    empty = client.get(grader_url(awaiting))
    assert empty.status_code == 200
    assert json.loads(empty.context["form"]["grader"].value()) == {"version": 1, "checks": []}
    assert "csv_shape" in empty.content.decode()  # the check types are listed

    Environment.objects.filter(pk=awaiting.pk).update(grader=GRADER)
    draft = client.get(grader_url(awaiting))
    assert json.loads(draft.context["form"]["grader"].value()) == GRADER
    assert "The form starts from the draft" in draft.content.decode()


def test_an_operator_supplies_a_grader_in_the_admin(
    awaiting, staff, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = client_for(staff).post(grader_url(awaiting), {"grader": json.dumps(SUPPLIED)})

    assert response.status_code == 302
    assert response["Location"] == f"/admin/environments/environment/{awaiting.pk}/change/"
    awaiting.refresh_from_db()
    assert (awaiting.status, awaiting.status_detail) == (Status.GRADED, "grader supplied by root")
    assert [c["type"] for c in awaiting.grader["checks"]] == [
        "file_exists", "command", "file_sha256",
    ]  # fmt: skip
    assert validation_job(awaiting.pk) is not None


def test_invalid_json_or_an_invalid_grader_is_shown_on_the_form(awaiting, staff):
    client = client_for(staff)

    not_json = client.post(grader_url(awaiting), {"grader": '{"version": 1, "checks": [}'})
    assert not_json.status_code == 200
    assert "Not valid JSON" in not_json.content.decode()
    # What was typed stays in the form, to be corrected.
    assert '{"version": 1, "checks": [}' in html.unescape(not_json.content.decode())

    hostile = _checks({"type": "file_exists", "path": "../../etc/passwd"})
    invalid = client.post(grader_url(awaiting), {"grader": json.dumps(hostile)})
    assert invalid.status_code == 200
    assert invalid.context["form"].errors["grader"] == [
        "check 1 (file_exists): path '../../etc/passwd' climbs out with '..'; name a file "
        "under /work"
    ]
    unchanged(awaiting)


def test_a_refusal_other_than_the_grader_is_shown_on_the_form(battle, staff):
    validated = environment(battle)

    response = client_for(staff).post(grader_url(validated), {"grader": json.dumps(SUPPLIED)})

    assert response.status_code == 200
    errors = response.context["form"].non_field_errors()
    assert len(errors) == 1 and "not awaiting a grader" in errors[0]
    validated.refresh_from_db()
    assert validated.status == Status.VALIDATED


def test_a_non_staff_user_cannot_supply_a_grader(awaiting, charlie):
    response = client_for(charlie).post(grader_url(awaiting), {"grader": json.dumps(SUPPLIED)})

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")
    unchanged(awaiting)


def test_staff_without_the_permission_cannot_supply_a_grader(awaiting):
    clerk = get_user_model().objects.create_user("clerk", password="x", is_staff=True)
    client = client_for(clerk)

    assert client.get(grader_url(awaiting)).status_code == 403
    response = client.post(grader_url(awaiting), {"grader": json.dumps(SUPPLIED)})
    assert response.status_code == 403
    unchanged(awaiting)


def test_an_unknown_environment_is_a_404_in_the_admin(db, staff):
    assert (
        client_for(staff).get("/admin/environments/environment/987654/grader/").status_code == 404
    )
