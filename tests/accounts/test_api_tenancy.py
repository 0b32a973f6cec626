"""Tenancy is structural: every /api/ view is tenant-scoped through
``TenantScopedApiMixin`` or on the explicit list of public and crowd-judging views
(``accounts.tenancy.UNSCOPED_API_VIEWS``); and an outsider (charlie, team Umbrella) gets
404 on Acme's task, battle and files, and changes nothing."""

import random
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework import generics
from rest_framework.views import APIView

from accounts.tenancy import UNSCOPED_API_VIEWS, TenantScopedApiMixin
from battles.models import Battle, Run, Step, Task
from battles.services import task_submit
from judging.models import Vote


def _walk(patterns, prefix=""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        else:
            assert isinstance(pattern, URLPattern)
            yield prefix + str(pattern.pattern), pattern


def api_views() -> dict[str, type]:
    """Route -> view class of every pattern under /api/ in the project's URLconf."""
    views = {}
    for route, pattern in _walk(get_resolver().url_patterns):
        if route.startswith("api/"):
            callback = pattern.callback
            views[route] = getattr(callback, "cls", None) or getattr(callback, "view_class", None)
    return views


def dotted(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def test_the_walk_finds_every_api_route():
    assert set(api_views()) == {
        "api/tasks/",
        "api/tasks/<id:pk>/",
        "api/battles/",
        "api/battles/<id:pk>/",
        "api/battles/<id:pk>/votes/",
        "api/battles/<id:pk>/votes/mine/",
        "api/battles/<id:pk>/votes/mine/reasons/",
        "api/vote-reasons/tags/",
        "api/battles/<id:pk>/conversation/",
        "api/battles/<id:pk>/follow-ups/",
        "api/battles/<id:pk>/questions/<id:question_id>/answer/",
        "api/battles/<id:pk>/machine-verdicts/",
        "api/machine-board/",
        "api/machine-agreement/",
        "api/judge/next/",
        "api/leaderboard/",
        "api/metrics/",
        "api/agent-protocol/",
        "api/schema/",
        "api/docs/",
        "api/teams/",
        "api/teams/<id:team>/invites/",
        "api/teams/<id:team>/invites/<id:pk>/",
        "api/teams/<id:team>/members/",
        "api/teams/<id:team>/members/<id:user>/",
        "api/invites/accept/",
        "api/agents/",
        "api/agents/<id:pk>/",
        "api/agents/<id:pk>/check/",
        "api/evaluations/",
        "api/evaluations/<id:pk>/",
        "api/evaluations/<id:pk>/cancel/",
        "api/evaluations/<id:pk>/progress/",
        "api/evaluations/<id:pk>/report.html",
        "api/runs/",
        "api/runs/<id:pk>/",
        "api/open-data/",
        "api/open-data/archive.tar.gz",
        "api/open-data/battles.jsonl",
        "api/open-data/votes.jsonl",
        "api/open-data/exclusions.jsonl",
        "api/open-data/ratings.jsonl",
        "api/open-data/vote_reasons.jsonl",
        "api/open-data/follow_ups.jsonl",
        "api/open-data/<path:rest>",
        "api/environments/",
        "api/environments/<id:pk>/package.tar.gz",
    }


def test_every_api_view_is_tenant_scoped_or_listed_as_unscoped():
    unaccounted = []
    for route, view in api_views().items():
        # a DRF view, so the API's exception handler (the envelope) answers its errors
        assert view is not None and issubclass(view, APIView), route
        scoped = issubclass(view, TenantScopedApiMixin)
        listed = dotted(view) in UNSCOPED_API_VIEWS
        assert not (scoped and listed), f"{route}: scoped and listed as unscoped"
        if not (scoped or listed):
            unaccounted.append(f"{route} ({dotted(view)})")
    assert unaccounted == [], (
        "API views that are neither tenant-scoped (accounts.tenancy.TenantScopedApiMixin) "
        "nor listed with a reason in accounts.tenancy.UNSCOPED_API_VIEWS"
    )


def test_the_unscoped_list_names_only_routed_views_each_with_a_reason():
    routed = {dotted(view) for view in api_views().values()}
    assert set(UNSCOPED_API_VIEWS) <= routed
    assert all(reason.strip() for reason in UNSCOPED_API_VIEWS.values())


def test_the_tenant_views_are_the_battles_api():
    scoped = {
        dotted(view) for view in api_views().values() if issubclass(view, TenantScopedApiMixin)
    }
    assert scoped == {
        "battles.api.TaskListCreateApi",
        "battles.api.TaskDetailApi",
        "battles.api.BattleListApi",
        "battles.api.BattleDetailApi",
        "battles.api.BattleConversationApi",
        "battles.api.FollowUpCreateApi",
        "battles.api.QuestionAnswerApi",
        "accounts.api.TeamListApi",
        "accounts.api.TeamInviteListCreateApi",
        "accounts.api.TeamInviteDetailApi",
        "accounts.api.TeamMemberListApi",
        "accounts.api.TeamMemberDetailApi",
        "agents.api.AgentListCreateApi",
        "agents.api.AgentDetailApi",
        "agents.api.AgentCheckApi",
        "evals.api.EvaluationListCreateApi",
        "evals.api.EvaluationDetailApi",
        "evals.api.EvaluationCancelApi",
        "evals.api_report.EvaluationProgressApi",
        "evals.api_report.EvaluationReportApi",
        "evals.api_run.RunCreateApi",
        "evals.api_run.RunDetailApi",
    }


@pytest.mark.parametrize("name", ["get_queryset", "get_object"])
def test_a_tenant_view_cannot_take_over_the_scope(name):
    with pytest.raises(TypeError, match=f"must not override or shadow {name}"):
        type("Sneaky", (TenantScopedApiMixin, generics.RetrieveAPIView), {name: lambda self: 0})
    with pytest.raises(TypeError, match="must not override or shadow get_queryset"):
        # the DRF base first would put its own get_queryset ahead of the mixin's
        type("Backwards", (generics.ListAPIView, TenantScopedApiMixin), {})


# --- outsiders --------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture
def acme_battle(alice, roster, settings):
    """Acme's battle, ended, with an attachment, a step screenshot and a delivered file
    on side A (written where the lanes write them)."""
    battle = task_submit(
        user=alice,
        instruction="Summarise the secret notes in the attached file",
        attachments=[SimpleUploadedFile("notes.txt", b"the secret plan\n")],
        rng=random.Random(3),
    )
    root = Path(settings.PRIVATE_MEDIA_ROOT)
    run = battle.runs.get(side="A")
    (root / "deliveries" / f"run-{run.pk}").mkdir(parents=True)
    (root / "deliveries" / f"run-{run.pk}" / "summary.txt").write_bytes(b"the plan is\n")
    (root / "screens").mkdir()
    (root / "screens" / "a0.png").write_bytes(PNG)
    Step.objects.create(
        run=run, index=0, tool="screenshot", screenshot="screens/a0.png",
        started_at=timezone.now(), duration_ms=5,
    )  # fmt: skip
    Run.objects.filter(battle=battle).update(status=Run.Status.ENDED, end_reason="delivered")
    run.delivered_files = [{"name": "summary.txt", "size": 12, "sha256": "x"}]
    run.save(update_fields=["delivered_files"])
    Battle.objects.filter(pk=battle.pk).update(status=Battle.Status.JUDGING)
    return battle


def snapshot(battle: Battle, settings) -> dict:
    """Everything an outsider's request could change about the battle."""
    root = Path(settings.PRIVATE_MEDIA_ROOT)
    return {
        "battle": list(Battle.objects.filter(pk=battle.pk).values()),
        "task": list(Task.objects.filter(pk=battle.task_id).values()),
        "runs": list(Run.objects.filter(battle=battle).order_by("side").values()),
        "steps": list(Step.objects.filter(run__battle=battle).values()),
        "votes": list(Vote.objects.filter(battle=battle).values()),
        "files": sorted(
            (str(p.relative_to(root)), p.read_bytes()) for p in root.rglob("*") if p.is_file()
        ),
    }


def test_the_team_reaches_everything_the_outsider_is_refused(api, client, bob, acme_battle):
    """The URLs of the outsider tests below are live ones: Acme's own member gets them."""
    battle = acme_battle
    assert api(bob).get(f"/api/tasks/{battle.task_id}/").status_code == 200
    assert api(bob).get(f"/api/battles/{battle.pk}/").status_code == 200
    client.force_login(bob)
    for url in (
        f"/battles/{battle.pk}/",
        f"/battles/{battle.pk}/panel/",
        f"/battles/{battle.pk}/attachments/0",
        f"/battles/{battle.pk}/deliveries/A/summary.txt",
        f"/battles/{battle.pk}/screens/A/0.png",
    ):
        assert client.get(url).status_code == 200, url


def test_the_outsider_gets_404_on_the_api_and_changes_nothing(api, charlie, acme_battle, settings):
    battle = acme_battle
    before = snapshot(battle, settings)
    client = api(charlie)
    not_found = {"error": {"code": "not_found", "message": "Not found."}}

    for method, url, body in [
        ("get", f"/api/tasks/{battle.task_id}/", None),
        ("get", f"/api/battles/{battle.pk}/", None),
        ("get", f"/api/battles/{battle.pk}/votes/mine/", None),
        ("delete", f"/api/battles/{battle.pk}/votes/mine/", None),
        ("post", f"/api/battles/{battle.pk}/votes/", {"choice": "A"}),
    ]:
        response = getattr(client, method)(url, body, format="json")
        assert response.status_code == 404, (method, url, response.content)
        assert response.json()["error"]["code"] == "not_found", url
        if url in (f"/api/tasks/{battle.task_id}/", f"/api/battles/{battle.pk}/"):
            assert response.json() == not_found  # exactly as a missing row
    assert client.get("/api/tasks/").json()["results"] == []
    assert client.get("/api/battles/").json()["results"] == []
    assert client.get("/api/tasks/99999/").json() == not_found

    assert snapshot(battle, settings) == before


@pytest.mark.parametrize("outsider", ["charlie", "judge"])
def test_the_outsider_gets_404_on_pages_and_files_and_changes_nothing(
    request, client, acme_battle, settings, outsider
):
    """charlie is another team; the judge was never served this battle."""
    battle = acme_battle
    before = snapshot(battle, settings)
    client.force_login(request.getfixturevalue(outsider))

    for url in (
        f"/battles/{battle.pk}/",
        f"/battles/{battle.pk}/panel/",
        f"/battles/{battle.pk}/runs/A/",
        f"/battles/{battle.pk}/attachments/0",
        f"/battles/{battle.pk}/deliveries/A/summary.txt",
        f"/battles/{battle.pk}/screens/A/0.png",
        f"/judge/{battle.pk}/A/files/0",
        f"/judge/{battle.pk}/A/steps/0/screenshot",
    ):
        response = client.get(url)
        assert response.status_code == 404, url
        assert b"secret" not in response.content and b"the plan" not in response.content
    for url in (f"/battles/{battle.pk}/end/A/", f"/judge/{battle.pk}/vote/"):
        assert client.post(url, {"choice": "A"}).status_code == 404, url

    assert snapshot(battle, settings) == before


@pytest.mark.parametrize(("url", "queries"), [("/api/tasks/", 5), ("/api/battles/", 3)])
def test_the_scoped_lists_cost_the_same_queries_for_one_row_or_many(
    api, alice, roster, django_assert_num_queries, url, queries
):
    """The team lookup, the count, the page (and for tasks its battles and files)."""
    client = api(alice)
    task_submit(user=alice, instruction="Create a file named one.txt containing 1")
    with django_assert_num_queries(queries):
        assert len(client.get(url).json()["results"]) == 1
    for instruction in (
        "List the files in the home folder",
        "Compute 6 times 7 and write it to answer.txt",
        "Open example.com and report the page title",
    ):
        task_submit(user=alice, instruction=instruction)
    with django_assert_num_queries(queries):
        assert len(client.get(url).json()["results"]) == 4
