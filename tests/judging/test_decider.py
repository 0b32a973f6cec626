"""The decider (judging/decider.py): due battles decided in batches, the same as one at
a time, exactly once with several deciders at once (threads and real processes, each
with its own connection, on real PostgreSQL)."""

import datetime as dt
import json
import signal
import subprocess
import threading
import time

import pytest
import time_machine
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from battles.models import Battle
from judging.decider import decider_run
from judging.models import Assignment, ExclusionLogEntry, JudgeProfile, Vote
from judging.services import battle_resolve
from judging.services.resolution import battles_resolve_due
from ratings.models import AgentRating
from ratings.services import agent_rating
from tests.judging.battle_factories import T0, ended_battle, people
from tests.servers import PYTHON, ROOT, child_env, ensure_public_arena

NOW = T0 + dt.timedelta(minutes=30)
PAIRS = [("rulebook", "idle"), ("surveyor", "rulebook"), ("idle", "surveyor")]


def vote(judge, battle, choice, *, final=-5.0, submitter=False, retracted=False, reason=""):
    """A vote cast 20 s before NOW whose window ends ``final`` seconds from NOW."""
    voted = NOW - dt.timedelta(seconds=20)
    Assignment.objects.get_or_create(
        judge=judge, battle=battle, defaults={"served_at": voted - dt.timedelta(minutes=1)}
    )
    return Vote.objects.create(
        judge=judge, battle=battle, choice=choice, served_at=voted - dt.timedelta(minutes=1),
        voted_at=voted, final_at=NOW + dt.timedelta(seconds=final), is_submitter=submitter,
        retracted=retracted, retracted_at=voted if retracted else None,
        admissible=not reason, inadmissible_reason=reason,
    )  # fmt: skip


def due_in_order(battles):
    for i, battle in enumerate(battles):
        Battle.objects.filter(pk=battle.pk).update(
            decide_due_at=NOW - dt.timedelta(seconds=100 - i)
        )


def scenario(alice, bob):
    """Battles that make a batch's decisions depend on each other: redundancy battles
    whose comparisons end probations (PROBATION_VOTES 1) and so decide whether a later
    lone probationary vote may decide; shared agents (the streaming Elo's order); a
    rule 7 exclusion; an expired battle the submitting team decides; an undone vote; a
    vote still in its window (frozen); a holder's assignment (voided)."""
    j1, j2, j3, j4, j5, holder = people(6)
    old = {"expired": True}
    battles = []

    def battle(i, *, expired=False, **kwargs):
        a, b = PAIRS[i % len(PAIRS)]
        made = ended_battle(alice, a=a, b=b, **kwargs)
        if expired:  # past JUDGING_TTL (a day)
            made.ended_at = NOW - dt.timedelta(days=3)
            Battle.objects.filter(pk=made.pk).update(ended_at=made.ended_at)
        battles.append(made)
        return made

    b = battle(0, target=3)  # 1: decided by 3; the comparisons establish j1..j3
    vote(j1, b, "A"), vote(j2, b, "A"), vote(j3, b, "A")
    b = battle(1)  # 2: a lone probationary vote: waits once probation binds (after 1)
    vote(j4, b, "B")
    b = battle(2)  # 3: j1, established by 1, decides with its new trust
    vote(j1, b, "A")
    b = battle(0, target=3)  # 4: compared again, on the counts 1 left
    vote(j1, b, "B"), vote(j2, b, "B"), vote(j3, b, "B"), vote(j5, b, "A", final=30)
    b = battle(1, **old)  # 5: expired with an abstention only: excluded (rule 7)
    vote(j4, b, "abstain", reason="abstain")
    b = battle(2, **old)  # 6: expired, only the submitting team voted: self-judged
    vote(bob, b, "tie", submitter=True)
    b = battle(0)  # 7: an undone vote, then another judge's: decided by the live one
    vote(j5, b, "A", final=-15, retracted=True)
    vote(j2, b, "B")
    b = battle(1)  # 8: one final vote and one in its window (frozen, counted), a holder
    vote(j3, b, "A"), vote(j4, b, "tie", final=6)
    Assignment.objects.create(judge=holder, battle=b, served_at=NOW - dt.timedelta(minutes=2))
    b = battle(2)  # 9: only an undone vote: waits, next due at JUDGING_TTL
    vote(j1, b, "A", final=5, retracted=True)
    b = battle(0, target=3)  # 10: two of three: waits for the third, due when j5's ends
    vote(j2, b, "A"), vote(j5, b, "A", final=8)
    due_in_order(battles)
    return battles


def state(battles):
    ids = [b.pk for b in battles]
    battle_fields = (
        "pk", "status", "outcome", "evidence_weight", "decision_source", "exclusion_reason",
        "cluster_judge_id", "decided_at", "first_judgment_at", "streaming_applied",
        "decide_due_at", "admissible_votes",
    )  # fmt: skip
    return {
        "battles": list(
            Battle.objects.filter(pk__in=ids).order_by("pk").values_list(*battle_fields)
        ),
        "votes": list(Vote.objects.filter(battle_id__in=ids).order_by("pk").values_list(
            "pk", "counted", "agreed", "final_at", "retracted")),
        "assignments": list(Assignment.objects.filter(battle_id__in=ids).order_by("pk")
                            .values_list("pk", "voided_at")),
        "profiles": list(JudgeProfile.objects.order_by("user_id").values_list(
            "user_id", "trust", "seen_count", "agree_count", "established_at")),
        "ratings": list(AgentRating.objects.order_by("agent_id").values_list(
            "agent_id", "streaming_rating", "rated_battles", "wins", "losses", "draws")),
        "log": list(ExclusionLogEntry.objects.filter(battle_id__in=ids).order_by("battle_id")
                    .values_list("battle_id", "action", "reason", "note")),
    }  # fmt: skip


def same(one, other, path="") -> None:
    """Equal, floats to 1e-12 (the streaming ratings and their deltas)."""
    if isinstance(one, float):
        assert other == pytest.approx(one, abs=1e-12, rel=0), path
    elif isinstance(one, dict):
        assert one.keys() == other.keys(), path
        for key in one:
            same(one[key], other[key], f"{path}.{key}")
    elif isinstance(one, list | tuple):
        assert len(one) == len(other), path
        for i, (x, y) in enumerate(zip(one, other, strict=True)):
            same(x, y, f"{path}[{i}]")
    else:
        assert one == other, path


@pytest.mark.django_db
def test_a_batch_decides_as_the_single_path_does_one_battle_after_another(
    alice, bob, roster, settings
):
    settings.ARENA = settings.ARENA.replace(vote_undo_window_s=10, probation_votes=1)
    battles = scenario(alice, bob)
    with time_machine.travel(NOW, tick=False):
        before = transaction.savepoint_create()
        for battle in battles:  # the single path, in the batch's order
            battle_resolve(battle_id=battle.pk)
        single = state(battles)
        transaction.savepoint_rollback(before)
        assert state(battles)["ratings"] == []  # back where it started
        taken, changed = battles_resolve_due(limit=50)
        batch = state(battles)

    assert taken == len(battles)
    same(single, batch)
    # the scenario did exercise what it says
    status = {pk: (s, o, src, reason) for pk, s, o, _, src, reason, *_ in batch["battles"]}
    assert [status[b.pk] for b in battles] == [
        ("decided", "A", "crowd", ""),
        ("judging", "", "", ""),  # probation binds since battle 1 established judges
        ("decided", "A", "crowd", ""),
        ("decided", "B", "crowd", ""),
        ("excluded", "", "", "no_admissible_vote"),
        ("decided", "tie", "submitter", ""),
        ("decided", "B", "crowd", ""),
        ("decided", "A", "crowd", ""),  # j3 established (A, 1.0) against j4 (tie, capped)
        ("judging", "", "", ""),
        ("judging", "", "", ""),
    ]
    assert changed == [b.pk for i, b in enumerate(battles) if i not in (1, 8, 9)]
    due = {row[0]: row[10] for row in batch["battles"]}
    assert due[battles[9].pk] == NOW + dt.timedelta(seconds=8)  # j5's window
    assert due[battles[8].pk] > NOW + dt.timedelta(hours=12)  # JUDGING_TTL
    frozen = Vote.objects.get(battle=battles[7], choice="tie")
    assert (frozen.counted, frozen.final_at) == (True, NOW)
    assert Assignment.objects.get(battle=battles[7], voided_at__isnull=False)
    assert sum(rated for _, _, rated, *_ in batch["ratings"]) == 2 * 6


@pytest.mark.django_db
def test_a_batch_costs_the_same_statements_whatever_its_size(alice, roster, settings):
    for agent in roster:  # rated before (their rows exist: the steady state)
        agent_rating(agent)
    judges = people(40)
    battles = []
    for i, judge in enumerate(judges):
        a, b = PAIRS[i % len(PAIRS)]
        battles.append(ended_battle(alice, a=a, b=b))
        vote(judge, battles[-1], "AB"[i % 2])
    due_in_order(battles)
    with time_machine.travel(NOW, tick=False), CaptureQueriesContext(connection) as queries:
        assert battles_resolve_due(limit=100) == (40, [b.pk for b in battles])
    sql = [q["sql"] for q in queries.captured_queries]
    # the savepoint pair, the locking read, the tally, the votes, the counted flags, the
    # open assignments, the agents' rows locked and the three updated, the battle rows
    assert len(sql) <= 12, "\n".join(sql)
    assert sum(AgentRating.objects.values_list("rated_battles", flat=True)) == 80


def exactly_once(battles, votes_per_battle=1):
    """Every battle decided, each once: its streaming update recorded, and every agent's
    rated count equal to the decided battles it played (a second application of a
    battle would count twice)."""
    rows = list(Battle.objects.filter(pk__in=[b.pk for b in battles]))
    assert {b.status for b in rows} == {"decided"}
    assert all(b.streaming_applied is not None and b.decide_due_at is None for b in rows)
    played = {}
    for b in rows:
        for agent_id in (b.agent_a_id, b.agent_b_id):
            played[agent_id] = played.get(agent_id, 0) + 1
    ratings = dict(AgentRating.objects.values_list("agent_id", "rated_battles"))
    assert ratings == played
    counted = Vote.objects.filter(battle__in=rows, counted=True).count()
    assert counted == votes_per_battle * len(rows)


def many_due(alice, count):
    judges = people(count, prefix="many")
    battles = []
    for i, judge in enumerate(judges):
        a, b = PAIRS[i % len(PAIRS)]
        battles.append(ended_battle(alice, a=a, b=b))
        vote(judge, battles[-1], ("A", "B", "tie")[i % 3])
    Battle.objects.filter(pk__in=[b.pk for b in battles]).update(
        decide_due_at=NOW - dt.timedelta(hours=1)
    )
    return battles


@pytest.mark.django_db(transaction=True)
def test_deciders_in_threads_decide_every_battle_exactly_once(alice, roster):
    ensure_public_arena()
    battles = many_due(alice, 90)
    start = threading.Barrier(3)
    results, errors = [], []

    def decider():
        try:
            start.wait()
            results.append(decider_run(batch=4, idle_s=0.01, until_idle=True))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=decider) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors
    # each battle was changed by one decider only, and the three shared the work
    assert sum(r.changed for r in results) == sum(r.taken for r in results) == 90
    exactly_once(battles)


@pytest.mark.django_db(transaction=True)
def test_decider_processes_share_the_due_battles_and_stop_on_sigterm(
    alice, roster, tmp_path, sandbox_root
):
    ensure_public_arena()
    battles = many_due(alice, 120)
    env = child_env(sandbox_root=sandbox_root, private_media_root=tmp_path / "private")
    command = [PYTHON, "manage.py", "decide", "--batch", "5", "--idle", "0.05"]
    deciders = [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while Battle.objects.filter(status="judging", pk__in=[b.pk for b in battles]).exists():
            assert time.monotonic() < deadline, "the deciders did not decide every battle"
            assert all(d.poll() is None for d in deciders)
            time.sleep(0.2)
        for decider in deciders:
            decider.send_signal(signal.SIGTERM)
        outputs = [decider.communicate(timeout=30) for decider in deciders]
    finally:
        for decider in deciders:
            if decider.poll() is None:
                decider.kill()
    assert [d.returncode for d in deciders] == [0, 0], outputs
    stats = [json.loads(out.decode().strip().splitlines()[-1])["decider"] for out, _ in outputs]
    assert sum(s["changed"] for s in stats) == 120
    # what each decider loaded at start-up is kept out of the collector's scans
    assert all(s["frozen_objects"] > 100_000 for s in stats), stats
    exactly_once(battles)


@pytest.mark.django_db
def test_a_battle_that_cannot_be_resolved_is_put_off_and_holds_up_no_other(
    alice, roster, monkeypatch
):
    import judging.services.resolution as resolution

    battles = many_due(alice, 5)
    bad = battles[2].pk
    real = resolution._resolve_with

    def broken(battle, *args):
        if battle.pk == bad:
            raise RuntimeError("a bug")
        return real(battle, *args)

    monkeypatch.setattr(resolution, "_resolve_with", broken)
    with time_machine.travel(NOW, tick=False):
        taken, changed = battles_resolve_due(limit=10)
    assert (taken, changed) == (5, [b.pk for b in battles if b.pk != bad])
    left = Battle.objects.get(pk=bad)
    assert left.status == "judging"
    assert left.decide_due_at == NOW + dt.timedelta(seconds=resolution.RETRY_FAILED_S)
    with time_machine.travel(NOW, tick=False):
        assert battles_resolve_due(limit=10) == (0, [])
