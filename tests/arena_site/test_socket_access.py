"""A socket of a team's data stops when its user may no longer hear it (arena_site/
realtime.py, TenantSocket): log-out through the real log-out view closes that session's
battle, judge and evaluation sockets at once (the user's other session keeps its own);
a membership removed (through the service, the team page or the admin) closes the
member's sockets of that team at once, and nothing published after the removal reaches
them; a session ended without a word (deleted, expired) is caught by the periodic
check; an outsider is never let in and never hears a frame. Real Redis channel layer,
the ASGI application with its session and auth middleware."""

import random

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.models import Session
from django.db import transaction
from django.test import Client

from accounts.models import Membership, Team
from accounts.services import team_member_remove
from agents.models import Agent, Arena
from arena_site.asgi import application
from arena_site.realtime import group_send
from battles.models import Battle
from battles.services import battle_publish, task_submit
from evals.presenters import progress_group
from tests.conftest import make_person

pytestmark = pytest.mark.django_db(transaction=True)  # sockets read committed rows


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def cookie_of(client: Client) -> bytes:
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def socket(path: str, client: Client | None) -> WebsocketCommunicator:
    headers = [(b"origin", b"http://127.0.0.1")]
    if client is not None:
        headers.append((b"cookie", cookie_of(client)))
    return WebsocketCommunicator(application, path, headers=headers)


async def opened(path: str, client: Client | None, *, state: bool = True):
    communicator = socket(path, client)
    connected, code = await communicator.connect(timeout=10)
    assert connected, code
    if state:
        await communicator.receive_from(timeout=10)  # the state sent on connect
    return communicator


async def closed_with(communicator: WebsocketCommunicator, timeout: float = 5) -> int:
    """The close code the server sent, after any frames (which fail the test)."""
    output = await communicator.receive_output(timeout=timeout)
    assert output["type"] == "websocket.close", f"a frame reached the socket: {output}"
    return output["code"]


def advance(battle: Battle, status: str) -> None:
    """A change of the battle, published after its commit (as every writer does)."""
    with transaction.atomic():
        Battle.objects.filter(pk=battle.pk).update(status=status)
        battle_publish(battle_id=battle.pk)


@pytest.fixture
def battle(alice, bob, roster) -> Battle:
    return task_submit(user=alice, instruction="list the files", rng=random.Random(2))


def test_log_out_closes_that_sessions_sockets_and_no_other(bob, battle):
    browser, phone = signed_in(bob), signed_in(bob)
    path = f"/ws/battles/{battle.pk}/"

    async def scenario():
        on_browser = await opened(path, browser)
        judge_on_browser = await opened("/ws/judge/", browser, state=False)
        on_phone = await opened(path, phone)

        response = await database_sync_to_async(browser.post)("/accounts/logout/")
        assert response.status_code == 302

        assert await closed_with(on_browser) == 4404
        assert await closed_with(judge_on_browser) == 4401
        await database_sync_to_async(advance)(battle, "running")
        frame = await on_phone.receive_from(timeout=5)  # the other session still hears
        assert 'id="battle-status">running<' in frame
        await on_phone.disconnect()

    async_to_sync(scenario)()


@pytest.mark.parametrize("fanout", ["process", "socket"])
def test_a_removed_member_hears_nothing_after_the_removal(alice, bob, battle, settings, fanout):
    settings.ARENA = settings.ARENA.replace(realtime_fanout=fanout)
    acme = Team.objects.get(name="Acme")
    path = f"/ws/battles/{battle.pk}/"
    bobs, alices = signed_in(bob), signed_in(alice)

    def remove_and_change() -> None:
        with transaction.atomic():  # the frame is published after the removal's commit
            team_member_remove(team=acme, member=bob, actor=alice)
            Battle.objects.filter(pk=battle.pk).update(status="running")
            battle_publish(battle_id=battle.pk)

    async def scenario():
        bob_watching = await opened(path, bobs)
        bob_judging = await opened("/ws/judge/", bobs, state=False)
        alice_watching = await opened(path, alices)

        await database_sync_to_async(remove_and_change)()

        assert await closed_with(bob_watching) == 4404  # no "running" frame before it
        assert 'id="battle-status">running<' in await alice_watching.receive_from(timeout=5)
        assert await bob_judging.receive_nothing(timeout=0.5)  # still signed in: stays
        again = socket(path, bobs)
        assert await again.connect(timeout=10) == (False, 4404)
        for communicator in (alice_watching, bob_judging):
            await communicator.disconnect()

    async_to_sync(scenario)()


def test_the_team_page_and_the_admin_close_the_sockets_of_whom_they_remove(
    alice, bob, battle, terms
):
    acme = Team.objects.get(name="Acme")
    dave = make_person("dave", "Acme", terms)
    operator = make_person("operator", None, terms)
    type(operator).objects.filter(pk=operator.pk).update(is_staff=True, is_superuser=True)
    path = f"/ws/battles/{battle.pk}/"
    bobs, daves = signed_in(bob), signed_in(dave)

    async def scenario():
        bob_watching, dave_watching = await opened(path, bobs), await opened(path, daves)

        page = await database_sync_to_async(signed_in)(alice)
        removed = await database_sync_to_async(page.post)(
            f"/accounts/teams/{acme.pk}/", {"action": "remove", "user": bob.pk}
        )
        assert removed.status_code == 200
        assert await closed_with(bob_watching) == 4404

        admin = await database_sync_to_async(signed_in)(operator)
        membership = await database_sync_to_async(Membership.objects.get)(team=acme, user=dave)
        deleted = await database_sync_to_async(admin.post)(
            f"/admin/accounts/membership/{membership.pk}/delete/", {"post": "yes"}
        )
        assert deleted.status_code == 302
        assert await closed_with(dave_watching) == 4404

    async_to_sync(scenario)()
    assert set(Membership.objects.filter(team=acme).values_list("user__username", flat=True)) == {
        "alice"
    }


def test_a_session_ended_without_a_word_is_caught_by_the_periodic_check(bob, battle, settings):
    settings.ARENA = settings.ARENA.replace(realtime_recheck_s=1.0)
    bobs = signed_in(bob)
    key = bobs.cookies["sessionid"].value

    async def scenario():
        watching = await opened(f"/ws/battles/{battle.pk}/", bobs)
        await watching.receive_nothing(timeout=0.2)
        # an operator clears the session store (or the session expires): nobody is told
        await database_sync_to_async(Session.objects.filter(session_key=key).delete)()
        assert await closed_with(watching, timeout=5) == 4404

    async_to_sync(scenario)()


def test_a_user_deactivated_is_caught_by_the_periodic_check(bob, battle, settings):
    settings.ARENA = settings.ARENA.replace(realtime_recheck_s=1.0)
    bobs = signed_in(bob)

    async def scenario():
        watching = await opened(f"/ws/battles/{battle.pk}/", bobs)
        await database_sync_to_async(type(bob).objects.filter(pk=bob.pk).update)(is_active=False)
        assert await closed_with(watching, timeout=5) == 4404

    async_to_sync(scenario)()


def test_a_socket_that_keeps_its_access_keeps_hearing(bob, battle, settings):
    settings.ARENA = settings.ARENA.replace(realtime_recheck_s=1.0)
    bobs = signed_in(bob)

    async def scenario():
        watching = await opened(f"/ws/battles/{battle.pk}/", bobs)
        await watching.receive_nothing(timeout=2.5)  # two periodic checks pass quietly
        await database_sync_to_async(advance)(battle, "running")
        assert 'id="battle-status">running<' in await watching.receive_from(timeout=5)
        await watching.disconnect()

    async_to_sync(scenario)()


def test_an_outsider_is_never_let_in_and_never_hears_a_frame(charlie, battle):
    outsiders = signed_in(charlie)

    async def scenario():
        refused = socket(f"/ws/battles/{battle.pk}/", outsiders)
        assert await refused.connect(timeout=10) == (False, 4404)
        judge_socket = await opened("/ws/judge/", outsiders, state=False)
        await database_sync_to_async(advance)(battle, "running")
        # charlie's own socket hears nothing of Acme's battle
        assert await judge_socket.receive_nothing(timeout=0.5)
        await judge_socket.disconnect()

    async_to_sync(scenario)()


@pytest.fixture
def evaluation(alice, bob):
    from tests.evals.test_pages import create

    for slug in ("alpha", "beta"):
        Agent.objects.create(
            arena=Arena.objects.public(), slug=slug, display_name=slug.title(),
            kind="scaffold", provider="openai", model_id=f"{slug}-model",
        )  # fmt: skip
    return create()


def test_the_evaluation_socket_closes_on_log_out_and_on_removal(alice, bob, evaluation):
    acme = Team.objects.get(name="Acme")
    path = f"/ws/evaluations/{evaluation.pk}/"
    alices, bobs = signed_in(alice), signed_in(bob)

    async def scenario():
        alice_watching, bob_watching = await opened(path, alices), await opened(path, bobs)

        await database_sync_to_async(team_member_remove)(team=acme, member=bob, actor=alice)
        assert await closed_with(bob_watching) == 4404
        await database_sync_to_async(group_send)(
            progress_group(evaluation.pk), {"html": "<div>progress</div>"}
        )
        assert await alice_watching.receive_from(timeout=5) == "<div>progress</div>"

        await database_sync_to_async(alices.post)("/accounts/logout/")
        assert await closed_with(alice_watching) == 4404

    async_to_sync(scenario)()
