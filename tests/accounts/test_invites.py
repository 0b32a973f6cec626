"""Team invites: an owner creates an expiring link (N uses, 1 by default), revokes it;
a signed-in user who opens it joins the team as a member, after consent. Every rule
tried to be broken: a member (bob) or an outsider (charlie) creating, listing or
revoking; an expired, revoked, used-up, reused or unknown link; joining twice; two
people racing for the last use; no consent. Only the token's digest is stored."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import Membership, Team, TeamInvite
from accounts.services import (
    consent_accept,
    consent_terms_publish,
    team_invite_accept,
    team_invite_create,
)
from arena_site.exceptions import ApplicationError
from tests.conftest import api_client_for, make_person


@pytest.fixture
def acme(alice) -> Team:
    return Team.objects.get(name="Acme")


@pytest.fixture
def dave(terms):
    return make_person("dave", None, terms)  # signed up elsewhere: no team of Acme's


def invites_url(team: Team) -> str:
    return reverse("api:team-invites", args=[team.pk])


def create_invite(team: Team, owner, **body) -> dict:
    answer = api_client_for(owner).post(invites_url(team), body, format="json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def accept(user, token: str):
    return api_client_for(user).post(reverse("api:invite-accept"), {"token": token}, format="json")


def roles(team: Team) -> dict[str, str]:
    return {m.user.username: m.role for m in team.memberships.select_related("user")}


# --- creating: owners only, the token shown once, stored as a digest ------------------------


def test_an_owner_creates_a_link_valid_seven_days_for_one_person(acme, alice):
    before = timezone.now()

    body = create_invite(acme, alice)

    token = body["token"]
    assert token.startswith("invite_") and len(token) > 30
    assert body["url"] == f"http://testserver/accounts/invites/{token}/"
    assert (body["state"], body["max_uses"], body["uses"], body["created_by"]) == (
        "active", 1, 0, "alice",
    )  # fmt: skip
    invite = TeamInvite.objects.get()
    assert before + timedelta(days=7) <= invite.expires_at <= timezone.now() + timedelta(days=7)
    # only the digest is stored: the token is in no column
    assert invite.digest == TeamInvite.digest_of(token) and invite.hint == token[:13]
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM accounts_teaminvite")
        assert not any(token in str(value) for value in cursor.fetchone())
    # and never shown again
    listed = api_client_for(alice).get(invites_url(acme)).json()
    assert token not in str(listed) and listed["results"][0]["hint"] == token[:13]


def test_a_member_who_is_not_an_owner_cannot_create_list_or_revoke(acme, alice, bob):
    invite, _ = team_invite_create(team=acme, actor=alice)
    client = api_client_for(bob)

    created = client.post(invites_url(acme), {}, format="json")
    listed = client.get(invites_url(acme))
    revoked = client.delete(reverse("api:team-invite", args=[acme.pk, invite.pk]))

    for answer in (created, listed, revoked):
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "not_team_owner"
    assert "Only an owner of team Acme" in created.json()["error"]["message"]
    assert TeamInvite.objects.count() == 1
    invite.refresh_from_db()
    assert invite.revoked_at is None


def test_another_teams_owner_sees_nothing_of_acmes_invites(acme, alice, charlie):
    invite, _ = team_invite_create(team=acme, actor=alice)
    client = api_client_for(charlie)  # owner of Umbrella

    for answer in (
        client.get(invites_url(acme)),
        client.post(invites_url(acme), {}, format="json"),
        client.delete(reverse("api:team-invite", args=[acme.pk, invite.pk])),
        # Umbrella's path with Acme's invite id: not Umbrella's invite
        client.delete(
            reverse("api:team-invite", args=[Team.objects.get(name="Umbrella").pk, invite.pk])
        ),
    ):
        assert answer.status_code == 404, answer.content
        assert answer.json()["error"]["code"] == "not_found"
    assert TeamInvite.objects.count() == 1
    invite.refresh_from_db()
    assert invite.revoked_at is None
    # the teams list names only charlie's own team
    teams = client.get(reverse("api:teams")).json()
    assert [(t["name"], t["role"]) for t in teams] == [("Umbrella", "owner")]


@pytest.mark.parametrize(
    ("body", "field"),
    [({"max_uses": 0}, "max_uses"), ({"max_uses": 51}, "max_uses"), ({"days": 0}, "days"),
     ({"days": 31}, "days"), ({"days": "7 days"}, "days")],
)  # fmt: skip
def test_bounds_of_uses_and_days(acme, alice, body, field):
    answer = api_client_for(alice).post(invites_url(acme), body, format="json")

    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith(f"{field}: ")
    assert TeamInvite.objects.count() == 0


# --- joining -----------------------------------------------------------------------------------


def test_a_signed_in_user_joins_as_a_member_and_the_link_is_then_used_up(
    acme, alice, dave, charlie
):
    token = create_invite(acme, alice)["token"]

    joined = accept(dave, token)
    again = accept(charlie, token)  # single use: the second person is refused

    assert joined.status_code == 201
    assert joined.json() == {"team": acme.pk, "team_name": "Acme", "role": "member"}
    assert again.status_code == 410
    assert again.json()["error"] == {
        "code": "invite_used",
        "message": "This invite link has been used as many times as it allows; ask the "
        "team's owner for a new one.",
    }
    assert roles(acme) == {"alice": "owner", "dave": "member"}
    assert TeamInvite.objects.get().uses == 1


def test_a_link_of_three_uses_admits_three(acme, alice, terms):
    token = create_invite(acme, alice, max_uses=3)["token"]
    people = [make_person(f"p{i}", None, terms) for i in range(4)]

    answers = [accept(p, token).status_code for p in people]

    assert answers == [201, 201, 201, 410]
    assert TeamInvite.objects.get().uses == 3


def test_joining_twice_spends_no_use(acme, alice, dave):
    token = create_invite(acme, alice, max_uses=2)["token"]
    assert accept(dave, token).status_code == 201

    again = accept(dave, token)
    owner = accept(alice, token)

    assert again.status_code == owner.status_code == 409
    assert again.json()["error"]["code"] == "already_member"
    assert TeamInvite.objects.get().uses == 1


def test_an_expired_link_admits_nobody(acme, alice, dave):
    token = create_invite(acme, alice, days=1)["token"]
    TeamInvite.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    answer = accept(dave, token)

    assert answer.status_code == 410
    assert answer.json()["error"]["code"] == "invite_expired"
    assert "expired" in answer.json()["error"]["message"]
    assert "dave" not in roles(acme)


def test_a_revoked_link_admits_nobody_and_revoking_again_is_a_no_op(acme, alice, dave):
    body = create_invite(acme, alice, max_uses=5)
    url = reverse("api:team-invite", args=[acme.pk, body["id"]])

    first = api_client_for(alice).delete(url)
    revoked_at = TeamInvite.objects.get().revoked_at
    second = api_client_for(alice).delete(url)
    answer = accept(dave, body["token"])

    assert first.status_code == second.status_code == 204
    assert TeamInvite.objects.get().revoked_at == revoked_at  # the first revocation stands
    assert answer.status_code == 410
    assert answer.json()["error"]["code"] == "invite_revoked"
    assert "dave" not in roles(acme)


@pytest.mark.parametrize(
    "token", ["invite_nothing-like-this", "arena_x", "", "invite_" + "a" * 200, 12]
)
def test_a_token_that_names_no_invite(acme, alice, dave, token):
    create_invite(acme, alice)

    answer = accept(dave, token)

    assert answer.status_code in (400, 404)
    if answer.status_code == 404:
        assert answer.json()["error"]["code"] == "invite_not_found"
    assert "dave" not in roles(acme)


def test_joining_needs_the_current_consent(acme, alice, terms):
    nobody = make_person("erin", None, None)  # never accepted the terms
    token = create_invite(acme, alice)["token"]

    answer = accept(nobody, token)

    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "consent_required"
    assert answer.json()["error"]["consent_url"] == "/accounts/consent/"
    assert "erin" not in roles(acme) and TeamInvite.objects.get().uses == 0


def test_anonymous_callers_cannot_join(acme, alice):
    token = create_invite(acme, alice)["token"]
    from rest_framework.test import APIClient

    answer = APIClient().post(reverse("api:invite-accept"), {"token": token}, format="json")

    assert answer.status_code == 401
    assert TeamInvite.objects.get().uses == 0


@pytest.mark.django_db(transaction=True)
def test_two_people_racing_for_the_last_use_one_joins(terms):
    alice = make_person("alice", "Acme", terms)
    acme = Team.objects.get(name="Acme")
    _, token = team_invite_create(team=acme, actor=alice)
    racers = [make_person(name, None, terms) for name in ("p1", "p2", "p3", "p4")]
    start = threading.Barrier(len(racers))
    outcomes: list[str] = []

    def race(user) -> None:
        start.wait()
        try:
            team_invite_accept(plain=token, user=user)
            outcomes.append("joined")
        except ApplicationError as refused:
            outcomes.append(refused.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=(user,)) for user in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert sorted(outcomes) == ["invite_used"] * 3 + ["joined"]
    assert Membership.objects.filter(team=acme, role="member").count() == 1
    assert TeamInvite.objects.get().uses == 1


# --- the pages ------------------------------------------------------------------------------


def page_client(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def test_the_link_walks_a_newcomer_through_sign_up_log_in_and_consent_into_the_team(
    acme, alice, terms
):
    token = create_invite(acme, alice)["token"]
    link = reverse("accounts:invite", args=[token])
    client = Client()

    landing = client.get(link)
    assert landing.status_code == 200
    assert b"Join team Acme" in landing.content and b"alice invites you" in landing.content
    assert f'href="/accounts/signup/?next={link}"'.encode() in landing.content
    assert f'href="/accounts/login/?next={link}"'.encode() in landing.content

    signed_up = client.post(
        "/accounts/signup/",
        {"username": "newbie", "password1": "a long pass phrase 9", "password2":
         "a long pass phrase 9", "team_name": "", "next": link},
    )  # fmt: skip
    assert signed_up.status_code == 302
    assert signed_up["Location"] == f"/accounts/login/?signed_up=1&next={link.replace('/', '%2F')}"
    login_page = client.get(signed_up["Location"])
    assert b'id="signed-up"' in login_page.content
    assert f'name="next" value="{link}"'.encode() in login_page.content
    logged_in = client.post(
        "/accounts/login/", {"username": "newbie", "password": "a long pass phrase 9", "next": link}
    )
    assert logged_in.status_code == 302 and logged_in["Location"] == link
    asked = client.get(link)
    assert asked["Location"] == f"/accounts/consent/?next={link.replace('/', '%2F')}"
    consented = client.post("/accounts/consent/", {"version": terms.version, "next": link})
    assert consented.status_code == 302 and consented["Location"] == link
    offer = client.get(link)
    assert b'id="join-team"' in offer.content
    joined = client.post(link)

    assert joined.status_code == 302 and joined["Location"] == f"/accounts/teams/{acme.pk}/"
    assert roles(acme)["newbie"] == "member"
    # the invite's team is their one team: sign-up made none of their own
    assert list(Membership.objects.filter(user__username="newbie").values_list(
        "team__name", flat=True)) == ["Acme"]  # fmt: skip
    page = client.get(joined["Location"])
    assert b"You joined team Acme as a member." in page.content
    assert b"Invite links" not in page.content  # a member sees no invites


def test_a_user_without_current_consent_is_sent_to_the_consent_page_first(acme, alice, dave):
    token = create_invite(acme, alice)["token"]
    link = reverse("accounts:invite", args=[token])
    consent_terms_publish(text="New terms.")  # dave's consent is no longer current

    answer = page_client(dave).post(link)

    assert answer.status_code == 302
    assert answer["Location"] == f"/accounts/consent/?next={link.replace('/', '%2F')}"
    assert "dave" not in roles(acme)


@pytest.mark.parametrize(
    ("spoil", "status", "words"),
    [
        ("expire", 410, b"This invite link has expired"),
        ("revoke", 410, b"This invite link was revoked"),
        ("use", 410, b"has been used as many times as it allows"),
        ("mistype", 404, b"This invite link is not valid"),
    ],
)
def test_a_spoiled_link_gives_a_clear_page(acme, alice, dave, charlie, spoil, status, words):
    token = create_invite(acme, alice)["token"]
    if spoil == "expire":
        TeamInvite.objects.update(expires_at=timezone.now() - timedelta(minutes=1))
    elif spoil == "revoke":
        TeamInvite.objects.update(revoked_at=timezone.now())
    elif spoil == "use":
        assert accept(charlie, token).status_code == 201
    else:
        token = token[:-3]

    for method in ("get", "post"):
        answer = getattr(page_client(dave), method)(reverse("accounts:invite", args=[token]))
        assert answer.status_code == status
        assert words in answer.content and b"This invite link cannot be used" in answer.content
        assert b"<header" in answer.content  # the site's layout
    assert "dave" not in roles(acme)


def test_the_team_page_lets_owners_create_and_revoke_links(acme, alice, bob, charlie):
    page = reverse("accounts:team", args=[acme.pk])
    owner = page_client(alice)

    created = owner.post(page, {"action": "create", "max_uses": 2, "days": 3})
    assert created.status_code == 200
    invite = TeamInvite.objects.get()
    assert (invite.max_uses, invite.created_by) == (2, alice)
    shown = created.content.decode()
    link_start = shown.index('id="new-invite-link">') + len('id="new-invite-link">')
    link = shown[link_start : shown.index("<", link_start)]
    assert TeamInvite.digest_of(link.rstrip("/").rsplit("/", 1)[1]) == invite.digest
    assert link not in owner.get(page).content.decode()  # shown once

    # a member sees the members only and cannot act
    member = page_client(bob)
    assert b"Invite links" not in member.get(page).content
    refused = member.post(page, {"action": "create", "max_uses": 1, "days": 1})
    assert refused.status_code == 403 and b"Only an owner of team Acme" in refused.content
    assert member.post(page, {"action": "revoke", "invite": invite.pk}).status_code == 403
    # an outsider gets a 404 for the page and every action
    outsider = page_client(charlie)
    assert outsider.get(page).status_code == 404
    assert outsider.post(page, {"action": "revoke", "invite": invite.pk}).status_code == 404
    assert TeamInvite.objects.count() == 1 and TeamInvite.objects.get().revoked_at is None

    revoked = owner.post(page, {"action": "revoke", "invite": invite.pk}, follow=True)
    assert b"revoked: the link admits nobody now" in revoked.content
    assert TeamInvite.objects.get().revoked_at is not None
    # a bad form is a 400 with the form's message, nothing created
    bad = owner.post(page, {"action": "create", "max_uses": 99, "days": 3})
    assert bad.status_code == 400 and TeamInvite.objects.count() == 1


# --- an invited newcomer gets no stray team of their own --------------------------------------


def sign_up_through(client: Client, next_url: str, username: str = "newbie", **extra):
    form = {"username": username, "password1": "a long pass phrase 9",
            "password2": "a long pass phrase 9", "next": next_url, **extra}  # fmt: skip
    return client.post(f"/accounts/signup/?next={next_url}", form)


def test_the_sign_up_form_from_an_invite_asks_no_team_name_and_makes_no_team(acme, alice, terms):
    link = reverse("accounts:invite", args=[create_invite(acme, alice)["token"]])
    teams_before = Team.objects.count()

    form = Client().get(f"/accounts/signup/?next={link}").content.decode()
    # (a team name typed anyway, by hand, is ignored)
    signed_up = sign_up_through(Client(), link, team_name="Stray team")

    assert 'name="team_name"' not in form and 'id="invited"' in form and "Acme" in form
    assert signed_up.status_code == 302
    newbie = get_user_model().objects.get(username="newbie")
    assert Team.objects.count() == teams_before and not Team.objects.filter(name="Stray team")
    assert not Membership.objects.filter(user=newbie).exists()  # until they join, no team
    # once joined (here through the API), the API lists the invite's team only
    consent_accept(user=newbie, terms=terms)
    answer = accept(newbie, link.rstrip("/").rsplit("/", 1)[1])
    assert answer.status_code == 201
    teams = api_client_for(newbie).get(reverse("api:teams")).json()
    assert [(t["name"], t["role"]) for t in teams] == [("Acme", "member")]


@pytest.mark.parametrize("spoil", ["revoked", "unknown", "elsewhere"])
def test_a_sign_up_from_a_spoiled_link_or_any_other_page_makes_a_team_as_ever(
    acme, alice, terms, spoil
):
    token = create_invite(acme, alice)["token"]
    if spoil == "revoked":
        TeamInvite.objects.update(revoked_at=timezone.now())
    next_url = {
        "revoked": reverse("accounts:invite", args=[token]),
        "unknown": reverse("accounts:invite", args=["invite_" + "x" * 20]),
        "elsewhere": "/submit/",
    }[spoil]

    form = Client().get(f"/accounts/signup/?next={next_url}").content.decode()
    signed_up = sign_up_through(Client(), next_url, team_name="Newbies")

    assert 'name="team_name"' in form
    assert signed_up.status_code == 302
    assert roles(Team.objects.get(name="Newbies")) == {"newbie": "owner"}
