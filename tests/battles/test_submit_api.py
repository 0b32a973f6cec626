import pytest

from battles.models import Battle, Run, Task


def test_submit_creates_task_battle_and_two_runs(
    api, alice, roster, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = api(alice).post(
            "/api/tasks/",
            {
                "instruction": "Create a file named a.txt containing hi",
                "start_url": "https://example.com/",
            },
            format="json",
        )
    assert response.status_code == 201
    body = response.json()
    assert set(body) == {"task", "battle", "status"} and body["status"] == "queued"
    battle = Battle.objects.get(pk=body["battle"])
    assert battle.task_id == body["task"]
    assert battle.agent_a_id != battle.agent_b_id
    assert sorted(Run.objects.filter(battle=battle).values_list("side", flat=True)) == ["A", "B"]
    assert battle.task.team.name == "Acme"
    assert len(callbacks) == 1  # the battle job is enqueued only after commit


def test_job_is_enqueued_on_the_battles_queue(
    api, alice, roster, django_capture_on_commit_callbacks
):
    import django_rq

    with django_capture_on_commit_callbacks(execute=True):
        battle_id = (
            api(alice)
            .post("/api/tasks/", {"instruction": "list the files"}, format="json")
            .json()["battle"]
        )
    queue = django_rq.get_queue("battles")
    assert queue.job_ids == [f"battle-{battle_id}"]
    assert queue.fetch_job(f"battle-{battle_id}").args == (battle_id,)


@pytest.mark.parametrize(
    ("payload", "status", "code"),
    [
        ({}, 400, "invalid"),
        ({"instruction": ""}, 400, "empty_instruction"),
        ({"instruction": "   \n "}, 400, "empty_instruction"),
        ({"instruction": "x" * 20_001}, 413, "instruction_too_long"),
        ({"instruction": "bad \x07 bell"}, 400, "invalid_instruction"),
        ({"instruction": "do it", "start_url": "file:///etc/passwd"}, 400, "invalid_start_url"),
        ({"instruction": "do it", "start_url": "ftp://example.com/"}, 400, "invalid_start_url"),
        ({"instruction": "do it", "start_url": "http://10.0.0.1/"}, 400, "start_url_not_public"),
        (
            {"instruction": "do it", "start_url": "http://127.0.0.1:8000/"},
            400,
            "start_url_not_public",
        ),
        ({"instruction": "do it", "start_url": "http://[::1]/"}, 400, "start_url_not_public"),
        (
            {"instruction": "do it", "start_url": "http://169.254.169.254/"},
            400,
            "start_url_not_public",
        ),
        ({"instruction": "do it", "start_url": "http://localhost/"}, 400, "start_url_not_public"),
    ],
)
def test_bad_input_gets_a_clear_error_and_creates_nothing(
    api, alice, roster, payload, status, code
):
    response = api(alice).post("/api/tasks/", payload, format="json")
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert Task.objects.count() == 0 and Battle.objects.count() == 0


def test_null_byte_instruction_is_refused(api, alice, roster):
    response = api(alice).post("/api/tasks/", {"instruction": "a\x00b"}, format="json")
    assert response.status_code == 400
    assert "Null characters" in response.json()["error"]["message"]


def test_roster_of_one_is_503(api, alice, roster):
    for agent in roster[1:]:
        agent.is_paused = True
        agent.save()
    response = api(alice).post("/api/tasks/", {"instruction": "list the files"}, format="json")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "roster_too_small"


def test_queue_bound_answers_429_with_retry_after(api, alice, roster, settings):
    settings.ARENA = settings.ARENA.replace(queue_max=2)
    client = api(alice)
    for i in range(2):
        assert (
            client.post("/api/tasks/", {"instruction": f"task {i}"}, format="json").status_code
            == 201
        )
    response = client.post("/api/tasks/", {"instruction": "one more"}, format="json")
    assert response.status_code == 429
    assert response["Retry-After"] == "60"
    assert response.json()["error"]["code"] == "queue_full"
    assert Task.objects.count() == 2


def test_team_quota_answers_429(api, alice, charlie, roster, settings):
    settings.ARENA = settings.ARENA.replace(team_queue_quota=1)
    assert api(alice).post("/api/tasks/", {"instruction": "one"}, format="json").status_code == 201
    response = api(alice).post("/api/tasks/", {"instruction": "two"}, format="json")
    assert response.status_code == 429 and response.json()["error"]["code"] == "team_quota"
    # another team is not held back by Acme's queue
    assert (
        api(charlie).post("/api/tasks/", {"instruction": "three"}, format="json").status_code == 201
    )


def test_submit_form_redirects_to_the_live_battle_page(client, alice, roster):
    client.force_login(alice)
    response = client.post("/submit/", {"instruction": "list the files", "start_url": ""})
    battle = Battle.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/battles/{battle.pk}/"


def test_submit_form_shows_the_error_message(client, alice, roster):
    client.force_login(alice)
    response = client.post("/submit/", {"instruction": "", "start_url": ""})
    assert response.status_code == 200
    assert "The instruction is empty" in response.content.decode()


@pytest.mark.parametrize("text", ["hi", "thanks!", "who are you?"])
def test_conversation_gets_a_reply_and_boots_nothing(api, alice, roster, text):
    response = api(alice).post("/api/tasks/", {"instruction": text}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "conversation"
    assert "no agents were started" in response.json()["reply"]
    assert Task.objects.count() == 0 and Battle.objects.count() == 0


def test_near_duplicate_is_409_naming_the_earlier_task(api, alice, roster):
    client = api(alice)
    first = client.post(
        "/api/tasks/",
        {"instruction": "Create a file named a.txt containing hello world"},
        format="json",
    ).json()
    response = client.post(
        "/api/tasks/",
        {"instruction": "create a file named a.txt containing hello world!"},
        format="json",
    )
    assert response.status_code == 409
    error = response.json()["error"]
    assert error["code"] == "near_duplicate" and error["earlier_task"] == first["task"]
    assert f"#{first['task']}" in error["message"]
    assert Task.objects.count() == 1


def test_near_duplicates_count_only_the_submitters_own_recent_tasks(api, alice, bob, roster):
    text = {"instruction": "Create a file named a.txt containing hello world"}
    assert api(alice).post("/api/tasks/", text, format="json").status_code == 201
    assert api(bob).post("/api/tasks/", text, format="json").status_code == 201  # bob's own


def test_a_hundredfold_near_duplicate_flood_admits_one(api, alice, roster):
    client = api(alice)
    codes = [
        client.post(
            "/api/tasks/",
            {"instruction": f"Open https://example.com and report the page title please {'!' * i}"},
            format="json",
        ).status_code
        for i in range(100)
    ]
    assert codes.count(201) == 1 and codes.count(409) == 99
    assert Task.objects.count() == 1


def test_near_duplicate_window_is_seven_days(api, alice, roster):
    import datetime as dt

    import time_machine

    text = {"instruction": "Create a file named a.txt containing hello world"}
    with time_machine.travel(dt.datetime(2026, 11, 1, tzinfo=dt.UTC)):
        assert api(alice).post("/api/tasks/", text, format="json").status_code == 201
    with time_machine.travel(dt.datetime(2026, 11, 9, tzinfo=dt.UTC)):
        assert api(alice).post("/api/tasks/", text, format="json").status_code == 201


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",  # 127.0.0.1 as one number
        "http://0x7f.0.0.1/",
        "http://[::ffff:10.0.0.1]/",
        "http://169.254.169.254/latest/meta-data/",
        "https://example.com:8443/",  # only 80 and 443 leave through the proxy
    ],
)
def test_odd_start_urls_are_refused(api, alice, roster, url):
    response = api(alice).post(
        "/api/tasks/", {"instruction": "do it", "start_url": url}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "start_url_not_public"
    assert Task.objects.count() == 0


def test_a_name_that_resolves_to_loopback_is_refused(api, alice, roster, monkeypatch):
    # DNS cannot be reached here: the resolver is the process boundary we stand in for.
    import ipaddress

    from battles.services import admission

    table = {"sneaky.example": ["127.0.0.1"], "good.example": ["93.184.216.34"]}
    monkeypatch.setattr(
        admission,
        "start_url_resolver",
        lambda: lambda host, port: [ipaddress.ip_address(a) for a in table.get(host, [])],
    )
    client = api(alice)
    bad = client.post(
        "/api/tasks/",
        {"instruction": "do it", "start_url": "http://sneaky.example/"},
        format="json",
    )
    assert bad.status_code == 400 and "loopback" in bad.json()["error"]["message"]
    good = client.post(
        "/api/tasks/",
        {"instruction": "do it now", "start_url": "https://good.example/"},
        format="json",
    )
    assert good.status_code == 201
    unknown = client.post(
        "/api/tasks/",
        {"instruction": "do it again", "start_url": "https://nowhere.example/"},
        format="json",
    )
    assert unknown.status_code == 400


def test_a_start_url_on_the_demo_web_passes_without_asking_dns(api, alice, roster, monkeypatch):
    from battles.services import admission

    def no_dns(host, port):
        raise AssertionError(f"DNS was asked for {host}")

    monkeypatch.setattr(admission, "start_url_resolver", lambda: no_dns)
    client = api(alice)
    ok = client.post(
        "/api/tasks/",
        {"instruction": "Read the news", "start_url": "http://demo.arena.test/news/"},
        format="json",
    )
    assert ok.status_code == 201, ok.json()
    assert Task.objects.get().category == "browsing"
    # only the simulated host's own port and scheme: the rest is refused as for any host
    for url in ("https://demo.arena.test/", "http://demo.arena.test:6379/"):
        refused = client.post(
            "/api/tasks/", {"instruction": f"Open {url}", "start_url": url}, format="json"
        )
        assert refused.status_code == 400, (url, refused.json())


def test_with_the_demo_web_off_its_name_is_asked_of_dns_like_any_other(
    api, alice, roster, monkeypatch, settings
):
    from battles.services import admission

    settings.ARENA = settings.ARENA.replace(demo_web=False)
    asked = []
    monkeypatch.setattr(
        admission, "start_url_resolver", lambda: lambda host, port: asked.append(host) or []
    )
    response = api(alice).post(
        "/api/tasks/",
        {"instruction": "Read the news", "start_url": "http://demo.arena.test/news/"},
        format="json",
    )
    assert response.status_code == 400
    assert asked == ["demo.arena.test"]
