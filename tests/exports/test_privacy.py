"""Judges appear only as keyed pseudonyms: no id, username or email anywhere in the
files (every byte of every file grepped, Parquet included); the same judge has the
same pseudonym under the same key and another under another key."""

import re

import pytest
from django.contrib.auth import get_user_model

from exports.pseudonyms import judge_pseudonym, pseudonym_key
from tests.exports.factories import SECRET, export, old_battle, rows, with_steps


@pytest.fixture
def agents(roster):
    return {a.slug: a for a in roster}


@pytest.fixture
def crowd(db):
    User = get_user_model()
    return [
        User.objects.create_user(
            f"judge-name-{i}",
            email=f"judge{i}@mail.example",
            password="x",
            first_name=f"Firstname{i}",
            last_name=f"Lastname{i}",
        )
        for i in range(3)
    ]


def _files(out):
    return [p for p in out.rglob("*") if p.is_file()]


def test_no_judge_identity_appears_in_any_file(tmp_path, alice, agents, crowd):
    battles = [
        old_battle(alice, agents["rulebook"], agents["idle"], judge=judge) for judge in crowd
    ]
    with_steps(battles[0])
    out, manifest = export(tmp_path, with_steps=True)
    assert manifest["counts"]["votes"] == 3
    forbidden = [alice.username, alice.email or "alice@", "Acme"]
    for judge in crowd:
        forbidden += [judge.username, judge.email, judge.first_name, judge.last_name]
    for path in _files(out):
        data = path.read_bytes()
        for word in forbidden:
            assert word.encode() not in data, (word, path.name)
    # the judges' ids appear nowhere as a judge value: every judge cell is a pseudonym
    pseudonyms = {v["judge"] for v in rows(out, "votes")}
    assert len(pseudonyms) == 3
    assert all(re.fullmatch(r"j_[0-9a-f]{20}", p) for p in pseudonyms)
    for row in rows(out, "battles"):
        assert row["judge"] in pseudonyms and row["cluster"] == row["judge"]
    # storage paths of deliveries never leave the arena
    assert b"secret/p" not in (out / "runs.jsonl").read_bytes()


def test_pseudonyms_are_stable_under_one_key_and_change_with_the_key(
    tmp_path, alice, agents, crowd
):
    for judge in crowd:
        old_battle(alice, agents["rulebook"], agents["idle"], judge=judge)
    first, m1 = export(tmp_path, "first")
    second, m2 = export(tmp_path, "second")
    other, m3 = export(tmp_path, "other", secret=SECRET + "-rotated")

    def by_battle(out):
        return {v["battle_id"]: v["judge"] for v in rows(out, "votes")}

    assert by_battle(first) == by_battle(second)
    assert m1["pseudonym_key_id"] == m2["pseudonym_key_id"] != m3["pseudonym_key_id"]
    assert set(by_battle(first).values()).isdisjoint(by_battle(other).values())
    # the pseudonym is the keyed hash of the judge, not something a reader can recompute
    key = pseudonym_key(SECRET)
    expected = {judge_pseudonym(j.pk, key) for j in crowd}
    assert set(by_battle(first).values()) == expected
    assert judge_pseudonym(crowd[0].pk, pseudonym_key("another")) not in expected


def test_an_answer_to_an_agents_question_is_published_redacted(tmp_path, alice, agents, crowd):
    # ask_user (issue 39): the answer is the submitter's own words, redacted as the
    # instructions are; the agent's question is its output, published as it is
    from battles.models import Step

    battle = old_battle(alice, agents["rulebook"], agents["idle"], judge=crowd[0])
    with_steps(battle, steps=1)
    answer = "Send it to jane.doe@example.com, or call me on +44 20 7946 0958"
    Step.objects.create(
        run=battle.runs.get(side="A"),
        index=1,
        tool="ask_user",
        args={"question": "Where should the report go?"},
        result={"ok": True, "tool": "ask_user", "stdout": answer, "data": {"answer": answer}},
        started_at=battle.ended_at,
        duration_ms=900,
    )
    out, _ = export(tmp_path, with_steps=True)
    data = (out / "steps.jsonl").read_bytes()
    assert b"jane.doe@example.com" not in data and b"7946" not in data
    asked = next(s for s in rows(out, "steps") if s["tool"] == "ask_user")
    assert asked["args"] == {"question": "Where should the report go?"}
    assert asked["result"]["stdout"] == asked["result"]["data"]["answer"]
    assert asked["result"]["stdout"].startswith("Send it to ") and "<" in asked["result"]["stdout"]
    shell = next(s for s in rows(out, "steps") if s["tool"] == "shell")
    assert shell["result"] == {"ok": True, "stdout": "0"}  # other steps as they were
