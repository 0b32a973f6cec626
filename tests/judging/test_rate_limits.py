"""Per-judge rate limits on real Redis: 429 with Retry-After and a message a person can
act on; other judges and the next window are unaffected."""

import datetime as dt

import time_machine

from judging.models import Assignment, Vote
from tests.judging.battle_factories import T0, ended_battle, people


def test_judge_next_over_the_limit_is_429_with_retry_after(api, judge, settings, db):
    settings.ARENA = settings.ARENA.replace(judge_next_rate_per_min=3)
    client = api(judge)
    with time_machine.travel(T0 + dt.timedelta(seconds=15), tick=False):
        codes = [client.get("/api/judge/next/").status_code for _ in range(4)]
        limited = client.get("/api/judge/next/")
    assert codes == [204, 204, 204, 429]
    assert limited.status_code == 429
    assert limited["Retry-After"] == "45"
    body = limited.json()["error"]
    assert body["code"] == "rate_limited"
    assert body["message"] == "Too many battle requests: at most 3 a minute. Try again in 45 s."
    # another judge has a budget of their own
    (other,) = people(1)
    with time_machine.travel(T0 + dt.timedelta(seconds=16), tick=False):
        assert api(other).get("/api/judge/next/").status_code == 204
    # the next minute starts afresh
    with time_machine.travel(T0 + dt.timedelta(seconds=60), tick=False):
        assert client.get("/api/judge/next/").status_code == 204


def test_votes_over_the_limit_are_429_and_not_stored(api, alice, judge, roster, settings):
    settings.ARENA = settings.ARENA.replace(vote_rate_per_min=2)
    battles = [ended_battle(alice) for _ in range(3)]
    for battle in battles:
        Assignment.objects.create(judge=judge, battle=battle, served_at=T0)
    client = api(judge)
    with time_machine.travel(T0 + dt.timedelta(seconds=30), tick=False):
        responses = [
            client.post(f"/api/battles/{b.pk}/votes/", {"choice": "A"}, format="json")
            for b in battles
        ]
        retraction = client.delete(f"/api/battles/{battles[0].pk}/votes/mine/")
    assert [r.status_code for r in responses] == [201, 201, 429]
    assert responses[2]["Retry-After"] == "30"
    assert "at most 2 a minute" in responses[2].json()["error"]["message"]
    assert retraction.status_code == 429  # retractions share the vote budget
    assert Vote.objects.filter(judge=judge).count() == 2
    assert not Vote.objects.filter(retracted=True).exists()


def test_the_counter_lives_in_redis(judge, settings, db):
    """The count is shared by every process: it is in the Redis cache, not in memory."""
    from django.core.cache import cache

    from judging.services import judge_rate_check

    with time_machine.travel(T0, tick=False):
        judge_rate_check(judge=judge, scope="next")
        judge_rate_check(judge=judge, scope="next")
    window = int(T0.timestamp() // 60)
    assert cache.get(f"judge-rate:next:{judge.pk}:{window}") == 2
    assert "RedisCache" in settings.CACHES["default"]["BACKEND"]


def test_the_judge_page_over_the_limit_says_so_with_429(client, judge, settings, db):
    settings.ARENA = settings.ARENA.replace(judge_next_rate_per_min=1)
    client.force_login(judge)
    with time_machine.travel(T0 + dt.timedelta(seconds=50), tick=False):
        assert client.get("/judge/").status_code == 200
        limited = client.get("/judge/")
    assert limited.status_code == 429
    assert limited["Retry-After"] == "10"
    assert "Too many battle requests: at most 1 a minute. Try again in 10 s." in (
        limited.content.decode()
    )
