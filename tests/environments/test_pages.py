"""Who sees which training environment (environments.selectors): anyone the validated
ones whose source battle the open data publishes, staff all; the list and detail
pages, the API's list and package download (404 for a hidden one, bounded per hour),
the conversion latency on the metrics page, and an operator's rejection (the service
and the admin)."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from arena_site.exceptions import ApplicationError
from environments.models import Environment
from environments.packages import package_read
from environments.review import environment_reject
from environments.selectors import conversion_latency, visible_environments
from tests.environments.environment_factories import environment, source_battle
from tests.ratings.factories import judges

Status = Environment.Status


@pytest.fixture
def world(alice, roster, settings):
    """Four environments: one public (validated, battle published), one validated whose
    battle is too recent to be published, one still graded, one rejected."""
    settings.ARENA = settings.ARENA.replace(export_delay_days=7, export_rate_per_hour=10)
    judge = judges(1)[0]
    old = [source_battle(alice, roster, judge, days=30) for _ in range(3)]
    recent = source_battle(alice, roster, judge, days=2)
    return {
        "public": environment(old[0]),
        "unpublished": environment(recent),
        "graded": environment(old[1], status=Status.GRADED),
        "rejected": environment(old[2], status=Status.REJECTED),
    }


@pytest.fixture
def staff(db):
    return get_user_model().objects.create_superuser("root", password="correct horse battery")


def client_for(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def api_for(user=None) -> APIClient:
    client = APIClient()
    if user is not None:
        client.force_authenticate(user)
    return client


def listed(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'data-environment="(\d+)"', html)]


def battle_ids_shown(html: str) -> set[int]:
    """Battle ids the page names: as links, or marked not published."""
    linked = re.findall(r'href="/battles/(\d+)/"', html)
    marked = re.findall(r'#(\d+) <span class="tag">not published', html)
    return {int(pk) for pk in linked + marked}


# -- the selectors ----------------------------------------------------------------------


def test_outsiders_see_only_validated_environments_of_published_battles(world, charlie):
    from django.contrib.auth.models import AnonymousUser

    for user in (AnonymousUser(), charlie):
        assert list(visible_environments(user)) == [world["public"]]


def test_staff_see_every_environment(world, staff):
    assert set(visible_environments(staff)) == set(world.values())


def test_conversion_latency_counts_validated_environments_and_their_targets(alice, roster):
    judge = judges(1)[0]
    battles = [source_battle(alice, roster, judge) for _ in range(4)]
    # targets: 2 × 100 + 300 = 500 s each
    for battle, seconds in zip(battles[:3], (100.0, 450.0, 900.0), strict=True):
        environment(battle, run_duration_s=100.0, conversion_s=seconds)
    environment(battles[3], status=Status.GRADED)

    figures = conversion_latency()

    assert figures == {
        "n": 3,
        "p50": 450.0,
        "p95": pytest.approx(900.0 - 0.05 * (900.0 - 450.0) * 2),
        "within_target": pytest.approx(2 / 3),
        "within_target_n": 2,
    }


def test_conversion_latency_with_no_environment_is_empty(db):
    assert conversion_latency() == {
        "n": 0,
        "p50": None,
        "p95": None,
        "within_target": None,
        "within_target_n": 0,
    }


# -- the pages ----------------------------------------------------------------------------


def test_the_list_shows_outsiders_the_public_environment_and_nothing_else(world, charlie):
    public, hidden_battles = world["public"], {world[k].battle_id for k in world if k != "public"}
    for client in (client_for(), client_for(charlie)):
        response = client.get("/environments/")

        assert response.status_code == 200
        html = response.content.decode()
        assert listed(html) == [public.pk]
        assert f'href="/battles/{public.battle_id}/"' in html
        assert not battle_ids_shown(html) & hidden_battles


def test_staff_see_every_environment_and_the_unpublished_battle(world, staff):
    html = client_for(staff).get("/environments/").content.decode()

    assert sorted(listed(html)) == sorted(e.pk for e in world.values())
    unpublished = world["unpublished"].battle_id
    assert f'#{unpublished} <span class="tag">not published</span>' in html
    assert f'href="/battles/{unpublished}/"' not in html


def test_the_detail_page_shows_instruction_checks_replays_and_download(world, charlie):
    env = world["public"]

    response = client_for(charlie).get(f"/environments/{env.pk}/")

    assert response.status_code == 200
    html = response.content.decode()
    assert "Sort &lt;PERSON_1&gt;&#x27;s data.csv by amount into out.csv." in html
    assert 'data-check="csv_shape"' in html and 'data-check="message_contains"' in html
    assert 'data-replay="failing"' in html and 'data-replay="reference"' in html
    assert f'href="/api/environments/{env.pk}/package.tar.gz"' in html
    assert "Open in the admin" not in html


def test_a_hidden_environment_is_a_404_to_outsiders_but_not_to_staff(world, charlie, staff):
    for key in ("unpublished", "graded", "rejected"):
        env = world[key]
        assert client_for().get(f"/environments/{env.pk}/").status_code == 404
        assert client_for(charlie).get(f"/environments/{env.pk}/").status_code == 404
        assert client_for(staff).get(f"/environments/{env.pk}/").status_code == 200
    assert client_for(staff).get("/environments/999999/").status_code == 404
    html = client_for(staff).get(f"/environments/{world['graded'].pk}/").content.decode()
    assert "package-download" not in html  # not validated: no package


def test_the_metrics_page_loads_the_latency_block_from_the_environments_url(world):
    metrics = client_for().get("/metrics/").content.decode()
    assert 'hx-get="/environments/latency"' in metrics

    block = client_for().get("/environments/latency")

    assert block.status_code == 200
    html = block.content.decode()
    # Every validated environment counts, published or not (an aggregate names none).
    assert '<div class="figure" id="environments-n">2</div>' in html
    assert '<div class="figure" id="environments-within">100%</div>' in html


# -- the API ------------------------------------------------------------------------------


def test_the_api_lists_what_the_caller_may_see(world, charlie, staff):
    public = world["public"]
    for client in (api_for(), api_for(charlie)):
        body = client.get("/api/environments/").json()
        assert body["count"] == 1
        assert body["results"] == [
            {
                "id": public.pk,
                "failure_mode": "gave_up",
                "status": "validated",
                "battle": public.battle_id,
                "validated_at": public.validated_at.isoformat().replace("+00:00", "Z"),
                "conversion_s": 400.0,
                "conversion_target_s": 540.0,
                "package_url": f"/api/environments/{public.pk}/package.tar.gz",
            }
        ]

    body = api_for(staff).get("/api/environments/?limit=10").json()
    assert body["count"] == 4
    rows = {row["id"]: row for row in body["results"]}
    assert rows[world["unpublished"].pk]["battle"] == world["unpublished"].battle_id
    assert rows[world["graded"].pk]["package_url"] is None


def test_the_list_costs_the_same_queries_whatever_its_length(world, alice, roster):
    client = api_for()
    with CaptureQueriesContext(connection) as one:
        assert client.get("/api/environments/").json()["count"] == 1
    judge = judges(1, prefix="more")[0]
    for _ in range(3):
        environment(source_battle(alice, roster, judge))

    with CaptureQueriesContext(connection) as four:
        assert client.get("/api/environments/").json()["count"] == 4

    assert len(four) == len(one) == 2  # the count, the page (publication is a subquery)


def test_the_package_downloads_for_a_visible_environment(world, charlie):
    env = world["public"]

    response = api_for(charlie).get(f"/api/environments/{env.pk}/package.tar.gz")

    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/gzip"
    assert response["Content-Disposition"] == f'attachment; filename="arena-env-{env.pk}.tar.gz"'
    package = package_read(response.content)
    assert package["task"]["source"]["battle"] == env.battle_id


def test_a_hidden_environments_package_is_a_404(world, charlie, staff):
    for key in ("unpublished", "graded", "rejected"):
        url = f"/api/environments/{world[key].pk}/package.tar.gz"
        for client in (api_for(), api_for(charlie)):
            response = client.get(url)
            assert response.status_code == 404, key
            assert response.json()["error"]["code"] == "not_found"
    # Staff see them all, but only a validated one has a package.
    graded = f"/api/environments/{world['graded'].pk}/package.tar.gz"
    assert api_for(staff).get(graded).status_code == 404
    unpublished = f"/api/environments/{world['unpublished'].pk}/package.tar.gz"
    response = api_for(staff).get(unpublished)
    assert response.status_code == 200
    assert package_read(response.content)["task"]["source"]["battle"] is None


def test_package_downloads_are_bounded_per_address_per_hour(world, settings):
    settings.ARENA = settings.ARENA.replace(export_rate_per_hour=1)
    url = f"/api/environments/{world['public'].pk}/package.tar.gz"
    client = api_for()

    assert client.get(url).status_code == 200
    response = client.get(url)

    assert response.status_code == 429
    assert response.json()["error"]["code"] == "rate_limited"
    assert 1 <= int(response["Retry-After"]) <= 3600


# -- rejection ----------------------------------------------------------------------------


def test_rejecting_needs_a_reason(world, staff):
    env = world["public"]

    with pytest.raises(ApplicationError) as refused:
        environment_reject(environment_id=env.pk, reason="   ", actor=staff)

    assert refused.value.code == "reason_required"
    assert refused.value.message.startswith("Say why the environment is rejected")
    env.refresh_from_db()
    assert (env.status, env.rejected_reason, env.rejected_by) == (Status.VALIDATED, "", None)


def test_a_rejected_environment_is_no_longer_listed_nor_downloadable(world, staff):
    env = world["public"]

    environment_reject(environment_id=env.pk, reason="  leaks a name  ", actor=staff)

    env.refresh_from_db()
    assert (env.status, env.rejected_reason, env.rejected_by) == (
        Status.REJECTED,
        "leaks a name",
        staff,
    )
    assert env.rejected_at is not None
    assert listed(client_for().get("/environments/").content.decode()) == []
    assert client_for().get(f"/environments/{env.pk}/").status_code == 404
    # the page a visitor still has open re-reads itself: told, and its polling stopped
    gone = client_for().get(f"/environments/{env.pk}/", HTTP_HX_REQUEST="true")
    assert gone.status_code == 286
    assert 'id="environment-live"' in gone.content.decode()
    assert "Environment no longer shown" in gone.content.decode()
    assert api_for().get(f"/api/environments/{env.pk}/package.tar.gz").status_code == 404
    assert api_for().get("/api/environments/").json()["count"] == 0


# -- the admin ----------------------------------------------------------------------------


def test_the_admin_lists_filters_and_shows_environments_read_only(world, staff):
    client = client_for(staff)

    changelist = client.get("/admin/environments/environment/?status__exact=validated")
    assert changelist.status_code == 200
    assert changelist.context["cl"].result_count == 2  # public and unpublished
    by_mode = client.get("/admin/environments/environment/?failure_mode__exact=budget")
    assert by_mode.context["cl"].result_count == 0

    change = client.get(f"/admin/environments/environment/{world['public'].pk}/change/")
    assert change.status_code == 200
    html = change.content.decode()
    assert "Reject this environment (asks why)" in html
    assert 'name="_save"' not in html  # read-only
    assert client.get("/admin/environments/environment/add/").status_code == 403


def test_an_operator_rejects_an_environment_with_a_reason_in_the_admin(world, staff):
    env, client = world["public"], client_for(staff)
    url = f"/admin/environments/environment/{env.pk}/reject/"

    empty = client.post(url, {"reason": "  "})
    assert empty.status_code == 200
    assert "This field is required." in empty.content.decode()
    env.refresh_from_db()
    assert env.status == Status.VALIDATED

    done = client.post(url, {"reason": "the grader checks the wrong file"})

    assert done.status_code == 302
    assert done["Location"] == f"/admin/environments/environment/{env.pk}/change/"
    env.refresh_from_db()
    assert (env.status, env.rejected_reason, env.rejected_by) == (
        Status.REJECTED,
        "the grader checks the wrong file",
        staff,
    )


def test_the_admin_action_asks_why_for_one_environment(world, staff):
    client = client_for(staff)
    picked = {"action": "reject", "_selected_action": [world["public"].pk]}

    response = client.post("/admin/environments/environment/", picked)

    assert response.status_code == 302
    assert response["Location"] == f"/admin/environments/environment/{world['public'].pk}/reject/"
    two = {"action": "reject", "_selected_action": [world["public"].pk, world["graded"].pk]}
    refused = client.post("/admin/environments/environment/", two, follow=True)
    assert "Select one environment at a time." in refused.content.decode()


def test_staff_without_the_permission_cannot_reject(world):
    clerk = get_user_model().objects.create_user("clerk", password="x", is_staff=True)

    response = client_for(clerk).post(
        f"/admin/environments/environment/{world['public'].pk}/reject/", {"reason": "no"}
    )

    assert response.status_code == 403
    world["public"].refresh_from_db()
    assert world["public"].status == Status.VALIDATED
