"""Leaving a team: an owner removes a member, anyone leaves, nobody else removes anyone,
and a team always keeps an owner, even when two owners remove each other at once. On
the team's page too (the sockets closing is tests/arena_site/test_socket_access.py)."""

import threading

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from accounts.models import Membership, Team
from accounts.services import team_member_remove
from arena_site.exceptions import ApplicationError
from tests.conftest import api_client_for, make_person


@pytest.fixture
def acme(alice, bob) -> Team:  # alice owns Acme, bob is a member
    return Team.objects.get(name="Acme")


def members(team: Team) -> dict[str, str]:
    return dict(team.memberships.values_list("user__username", "role"))


def test_an_owner_removes_a_member(acme, alice, bob):
    team_member_remove(team=acme, member=bob, actor=alice)
    assert members(acme) == {"alice": "owner"}


def test_a_member_leaves(acme, bob):
    team_member_remove(team=acme, member=bob, actor=bob)
    assert members(acme) == {"alice": "owner"}


def test_a_member_cannot_remove_another(acme, alice, bob, terms):
    dave = make_person("dave", "Acme", terms)
    for target in (alice, dave):
        with pytest.raises(ApplicationError) as refused:
            team_member_remove(team=acme, member=target, actor=bob)
        assert (refused.value.status, refused.value.code) == (403, "not_team_owner")
    assert set(members(acme)) == {"alice", "bob", "dave"}


def test_the_last_owner_cannot_leave_and_another_owner_lets_them(acme, alice, bob):
    with pytest.raises(ApplicationError) as refused:
        team_member_remove(team=acme, member=alice, actor=alice)
    assert (refused.value.status, refused.value.code) == (409, "last_owner")
    assert "the only owner of team Acme" in refused.value.message

    Membership.objects.filter(team=acme, user=bob).update(role="owner")
    team_member_remove(team=acme, member=alice, actor=alice)
    assert members(acme) == {"bob": "owner"}


def test_someone_not_in_the_team(acme, alice, charlie):
    with pytest.raises(ApplicationError) as refused:
        team_member_remove(team=acme, member=charlie, actor=alice)
    assert (refused.value.status, refused.value.code) == (404, "not_member")


@pytest.mark.django_db(transaction=True)
def test_two_owners_removing_each_other_at_once_leave_one(terms):
    ann, ben = make_person("ann", "Twins", terms), make_person("ben", None, terms)
    twins = Team.objects.get(name="Twins")
    Membership.objects.create(team=twins, user=ben, role="owner")
    barrier = threading.Barrier(2)
    outcomes: list[str] = []

    def remove(member, actor) -> None:
        try:
            barrier.wait(timeout=10)
            team_member_remove(team=twins, member=member, actor=actor)
            outcomes.append("removed")
        except ApplicationError as refused:
            outcomes.append(refused.code)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=remove, args=(ben, ann)),
        threading.Thread(target=remove, args=(ann, ben)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    roles = members(twins)
    assert list(roles.values()) == ["owner"]
    assert sorted(outcomes) in (["last_owner", "removed"], ["not_member", "removed"],
                                ["not_team_owner", "removed"])  # fmt: skip


def page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_team_page_offers_remove_to_owners_and_leave_to_everyone(acme, alice, bob):
    owners_view = page(alice).get(f"/accounts/teams/{acme.pk}/").content.decode()
    members_view = page(bob).get(f"/accounts/teams/{acme.pk}/").content.decode()

    assert ">Remove</button>" in owners_view and ">Leave team</button>" in owners_view
    assert ">Remove</button>" not in members_view and ">Leave team</button>" in members_view


def test_the_team_page_removes_and_leaves(acme, alice, bob, terms):
    dave = make_person("dave", "Acme", terms)

    removed = page(alice).post(f"/accounts/teams/{acme.pk}/", {"action": "remove",
                                                               "user": bob.pk})  # fmt: skip
    assert (
        removed.status_code == 200 and "bob is no longer in the team." in removed.content.decode()
    )
    left = page(dave).post(f"/accounts/teams/{acme.pk}/", {"action": "remove", "user": dave.pk})
    assert left.status_code == 302 and left["Location"] == "/accounts/settings/"
    assert members(acme) == {"alice": "owner"}


def test_the_team_page_refuses_in_words(acme, alice, bob, charlie):
    refused = page(bob).post(f"/accounts/teams/{acme.pk}/", {"action": "remove",
                                                             "user": alice.pk})  # fmt: skip
    assert refused.status_code == 403
    assert "Only an owner of team Acme may remove members" in refused.content.decode()
    last = page(alice).post(f"/accounts/teams/{acme.pk}/", {"action": "remove", "user": alice.pk})
    assert last.status_code == 409 and "the only owner of team Acme" in last.content.decode()
    # another team's page (and its members) do not exist for an outsider
    outsider = page(charlie).post(f"/accounts/teams/{acme.pk}/", {"action": "remove",
                                                                  "user": bob.pk})  # fmt: skip
    assert outsider.status_code == 404
    nobody = page(alice).post(f"/accounts/teams/{acme.pk}/", {"action": "remove",
                                                              "user": charlie.pk})  # fmt: skip
    assert nobody.status_code == 404
    assert set(members(acme)) == {"alice", "bob"}


# --- the navigation's "Team" ------------------------------------------------------------------


def test_team_in_the_navigation_opens_your_team_or_lists_your_teams(acme, alice, bob, terms):
    from accounts.models import Membership as Member

    one = page(bob).get("/accounts/team/")
    Member.objects.create(team=Team.objects.create(name="Other"), user=bob, role="owner")
    two = page(bob).get("/accounts/team/").content.decode()
    none = page(make_person("dave", None, terms)).get("/accounts/team/").content.decode()
    anonymous = Client().get("/accounts/team/")

    assert one.status_code == 302 and one["Location"] == f"/accounts/teams/{acme.pk}/"
    assert f'href="/accounts/teams/{acme.pk}/">Acme</a> (member)' in two and ">Other</a>" in two
    assert 'id="no-team"' in none
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert 'href="/accounts/team/">Team</a>' in page(bob).get("/my-agents/").content.decode()


# --- the API: GET /api/teams/{team}/members/, DELETE .../members/{user}/ ----------------------


def member_url(team: Team, user) -> str:
    return reverse("api:team-member", args=[team.pk, user.pk])


def test_the_api_lists_members_to_members_and_404s_to_outsiders(acme, alice, bob, charlie):
    listed = api_client_for(bob).get(reverse("api:team-members", args=[acme.pk]))
    outsider = api_client_for(charlie).get(reverse("api:team-members", args=[acme.pk]))

    assert [(m["username"], m["role"]) for m in listed.json()] == [("alice", "owner"),
                                                                     ("bob", "member")]  # fmt: skip
    assert outsider.status_code == 404 and outsider.json()["error"]["code"] == "not_found"


def test_the_api_removes_and_leaves_with_the_same_rules_as_the_page(
    acme, alice, bob, charlie, terms
):
    dave = make_person("dave", "Acme", terms)

    by_member = api_client_for(bob).delete(member_url(acme, dave))
    by_outsider = api_client_for(charlie).delete(member_url(acme, dave))
    not_in_team = api_client_for(alice).delete(member_url(acme, charlie))
    last_owner = api_client_for(alice).delete(member_url(acme, alice))
    assert (by_member.status_code, by_member.json()["error"]["code"]) == (403, "not_team_owner")
    assert by_outsider.status_code == 404 and not_in_team.status_code == 404
    assert by_outsider.json() == not_in_team.json()  # another team is like a missing member
    assert (last_owner.status_code, last_owner.json()["error"]["code"]) == (409, "last_owner")
    assert set(members(acme)) == {"alice", "bob", "dave"}

    removed = api_client_for(alice).delete(member_url(acme, dave))
    left = api_client_for(bob).delete(member_url(acme, bob))

    assert (removed.status_code, left.status_code) == (204, 204)
    assert members(acme) == {"alice": "owner"}
