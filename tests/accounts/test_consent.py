from accounts.models import Consent, Team
from accounts.services import consent_terms_publish


def test_sign_up_creates_a_team_then_log_in_leads_to_consent(client, terms):
    response = client.post(
        "/accounts/signup/",
        {
            "username": "dana",
            "password1": "a long passphrase 42",
            "password2": "a long passphrase 42",
        },
    )
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?signed_up=1"
    team = Team.objects.get(name="dana")
    assert team.memberships.get().role == "owner"
    assert "_auth_user_id" not in client.session  # not signed in by sign-up itself

    logged_in = client.post(
        "/accounts/login/", {"username": "dana", "password": "a long passphrase 42"}
    )
    # a new account lands on the judge page (judging.selectors.landing_url), consent first
    assert logged_in["Location"] == "/start/"
    assert client.get("/start/")["Location"] == "/judge/"
    assert client.get("/judge/")["Location"] == "/accounts/consent/?next=/judge/"


def test_submit_page_sends_unconsented_user_to_consent(client, alice):
    consent_terms_publish(text="New terms: more publication.")
    client.force_login(alice)
    response = client.get("/submit/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/consent/?next=/submit/")


def test_accepting_the_current_version_opens_submission(client, alice):
    new = consent_terms_publish(text="Version two.")
    client.force_login(alice)
    response = client.post("/accounts/consent/", {"version": new.version, "next": "/submit/"})
    assert response.status_code == 302 and response["Location"] == "/submit/"
    assert Consent.objects.filter(user=alice, terms=new).exists()
    assert client.get("/submit/").status_code == 200


def test_accepting_a_stale_version_does_not_count(client, alice, terms):
    newer = consent_terms_publish(text="Version two.")
    client.force_login(alice)
    client.post("/accounts/consent/", {"version": terms.version})
    assert not Consent.objects.filter(user=alice, terms=newer).exists()


def test_consent_next_refuses_offsite_redirects(client, alice):
    new = consent_terms_publish(text="v2")
    client.force_login(alice)
    response = client.post(
        "/accounts/consent/", {"version": new.version, "next": "https://evil.example/"}
    )
    assert response["Location"] == "/start/"  # where log-in lands too


def test_api_submission_without_current_consent_is_403_with_link(api, alice, roster):
    consent_terms_publish(text="v2")
    response = api(alice).post("/api/tasks/", {"instruction": "list the files"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "consent_required"
    assert response.json()["error"]["consent_url"] == "/accounts/consent/"
