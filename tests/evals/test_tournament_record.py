"""The tournament run record (evals.tournament_record) from scripted judged games: a
round robin of three candidates on two tasks, an elimination with a seeded fallback and
a failed game, king of the hill with early series stops; a no-judge record; coverage
mismatches reported, never rewritten; the published schema, with teeth; never a key."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from evals import tournament_record as tr
from evals.games import GameResult, ratings
from evals.tournament_record import GameDetail, RecordError, tournament_record
from evals.tournaments import KING_OF_THE_HILL, ROUND_ROBIN, SINGLE_ELIMINATION, run_task

SCHEMA = json.loads((Path(tr.__file__).parent / "tournament_record.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
SHA = "ab" * 32
LETTER = {"A": "A", "B": "B", "t": "tie", "-": ""}


def agent(slug: str) -> dict:
    return {"slug": slug, "provider": "openai", "model": f"{slug}-model",
            "base_url": "http://127.0.0.1:9/v1"}  # fmt: skip


def provenance(candidates: list[str], n_tasks: int) -> dict:
    return {
        "app_version": "0.1.0+gabcdef012345",
        "run_id": 41,
        "status": "done",
        "created_at": "2025-05-01T10:00:00+00:00",
        "started_at": "2025-05-01T10:00:01+00:00",
        "finished_at": "2025-05-01T10:02:00+00:00",
        "candidate_max_tokens": 4096,
        "attempts": 3,
        "backoff_s": [1.0, 2.0],
        "concurrency": 4,
        "selection_seed": None,
        "suite": {"name": "sums.yaml", "sha256": SHA, "tasks": n_tasks},
        "agents": [agent(c) for c in candidates],
        "judge_decoding": {"temperature": 0, "max_tokens": 4096},
    }


def task(task_id: str, expected: str | None = None) -> dict:
    return {"id": task_id, "kind": "chat", "prompt": f"Solve {task_id}.", "reference": None,
            "expected": expected, "meta": {}, "start_url": "", "attachments": [],
            "success_cmd": None}  # fmt: skip


def result(task_id: str, model: str, output: str, score: float | None) -> dict:
    return {"task_id": task_id, "model": model, "status": "done", "output": output, "error": "",
            "exact_score": score, "duration_ms": 120, "attempts": 1}  # fmt: skip


class Judge:
    """A scripted pairwise judge: per (task, a, b), one two-letter code per game, the
    (A, B) orientation's verdict then the (B, A) one mapped back ("A", "B", "t" tie,
    "-" that orientation failed for good). Keeps every game it resolved."""

    def __init__(self, script: dict[tuple[str, str, str], list[str]]) -> None:
        self.script = script
        self.games: list[GameDetail] = []

    def __call__(self, task_id: str, a: str, b: str, number: int) -> str:
        ab, ba = (LETTER[x] for x in self.script[(task_id, a, b)][number - 1])
        tag = f"{task_id} {a}-{b} #{number}"
        common = dict(task_id=task_id, a=a, b=b, game=number, ab_winner=ab, ba_winner=ba,
                      ab_reason=f"ab {tag}" if ab else "", ba_reason=f"ba {tag}" if ba else "",
                      ab_raw=(f'{{"winner": "{ab}"}}',) if ab else ("not json", "not json"),
                      ba_raw=(f'{{"winner": "{ba}"}}',) if ba else ("not json", "not json"),
                      duration_ms=100 + number)  # fmt: skip
        if not ab or not ba:
            self.games.append(GameDetail(**common, failure="judge reply not in the schema"))
            return "failed"
        winner = ab if ab == ba else "tie"
        self.games.append(GameDetail(**common, winner=winner, agreement=ab == ba))
        return winner


def build(candidates, tasks, results, judge, *, format, best_of=1, seed=0, opening=None,
          replicates=40, drop_games=0, judge_usage=None):  # fmt: skip
    tournaments = [
        run_task(t["id"], candidates, format=format, best_of=best_of, seed=seed, play=judge,
                 opening=opening)
        for t in tasks
    ]  # fmt: skip
    return tournament_record(
        run=provenance(candidates, len(tasks)),
        tasks=tasks,
        results=results,
        games=judge.games[: len(judge.games) - drop_games],
        tournaments=tournaments,
        candidates=candidates,
        judge=agent("judge"),
        seed=seed,
        replicates=replicates,
        format=format,
        best_of=best_of,
        opening=opening,
        judge_usage=judge_usage,
    )


def coverage_of(run: dict) -> dict:
    return {k: run[k] for k in ("expected_pairs", "resolved_pairs", "failed_pairs", "complete")}


def valid(record: dict) -> list[str]:
    return [e.message for e in VALIDATOR.iter_errors(record)]


def series(round_, a, b, status, winner, advanced, games, *, fallback=False):
    """A series as the record states it, from its regulation games' outcomes."""
    return {
        "round": round_, "a": a, "b": b, "status": status, "winner": winner,
        "advanced": advanced, "seeded_fallback": fallback,
        "wins_a": sum(1 for o in games if o == "A"),
        "wins_b": sum(1 for o in games if o == "B"), "draws": sum(1 for o in games if o == "tie"),
        "games": [{"game": n, "kind": "regulation", "outcome": o} for n, o in enumerate(games, 1)],
    }  # fmt: skip


RR = ["alpha", "beta", "gamma"]
RR_TASKS = [task("t1", "2"), task("t2")]
RR_RESULTS = [
    result("t1", "alpha", "2", 1.0),
    result("t1", "beta", "3", 0.0),
    result("t1", "gamma", "2", 1.0),
    result("t2", "beta", "long answer", None),
    result("t2", "alpha", "short answer", None),
]  # gamma has no result on t2: "missing"
RR_SCRIPT = {
    ("t1", "alpha", "beta"): ["AA"],
    ("t1", "alpha", "gamma"): ["AB"],  # the orientations disagree: a draw
    ("t1", "beta", "gamma"): ["BB"],
    ("t2", "alpha", "beta"): ["BB"],
    ("t2", "alpha", "gamma"): ["AA"],
    ("t2", "beta", "gamma"): ["A-"],  # the (B, A) orientation failed for good
}


def test_round_robin_record():
    judge = Judge(RR_SCRIPT)
    record = build(RR, RR_TASKS, RR_RESULTS, judge, format=ROUND_ROBIN, seed=5)
    assert valid(record) == []
    run = record["run"]
    assert run["judge"] == agent("judge")
    assert coverage_of(run) == {
        "expected_pairs": 6, "resolved_pairs": 5, "failed_pairs": 1, "complete": False
    }  # fmt: skip
    assert "coverage_error" not in run
    assert run["orientation_agreement"] == {
        "resolved_pairs": 5, "orientation_agreeing_pairs": 4,
        "orientation_disagreeing_pairs": 1, "agreement_rate": 0.8,
    }  # fmt: skip
    assert run["judge_decoding"] == {"temperature": 0, "max_tokens": 4096}
    # task-file then candidate order, whatever order the results came in
    assert [(r["task_id"], r["model"], r["status"]) for r in record["results"]] == [
        ("t1", "alpha", "done"), ("t1", "beta", "done"), ("t1", "gamma", "done"),
        ("t2", "alpha", "done"), ("t2", "beta", "done"), ("t2", "gamma", "missing"),
    ]  # fmt: skip
    assert record["comparisons"] == [
        {"task_id": "t1", "model_a": "alpha", "model_b": "beta", "score_a": 1.0, "score_b": 0.0,
         "winner": "alpha"},
        {"task_id": "t1", "model_a": "alpha", "model_b": "gamma", "score_a": 1.0,
         "score_b": 1.0, "winner": "tie"},
        {"task_id": "t1", "model_a": "beta", "model_b": "gamma", "score_a": 0.0, "score_b": 1.0,
         "winner": "gamma"},
    ]  # fmt: skip
    assert record["judgments"][1] == {
        "task_id": "t1", "model_a": "alpha", "model_b": "gamma", "game": 1, "winner": "tie",
        "agreement": False,
        "ab": {"winner": "alpha", "reason": "ab t1 alpha-gamma #1", "raw": ['{"winner": "A"}']},
        "ba": {"winner": "gamma", "reason": "ba t1 alpha-gamma #1", "raw": ['{"winner": "B"}']},
        "duration_ms": 101,
    }  # fmt: skip
    outcomes = [
        (j["task_id"], j["model_a"], j["model_b"], j["winner"]) for j in record["judgments"]
    ]
    assert outcomes == [
        ("t1", "alpha", "beta", "alpha"), ("t1", "alpha", "gamma", "tie"),
        ("t1", "beta", "gamma", "gamma"), ("t2", "alpha", "beta", "beta"),
        ("t2", "alpha", "gamma", "alpha"),
    ]  # fmt: skip
    assert record["judgment_failures"] == [
        {"task_id": "t2", "model_a": "beta", "model_b": "gamma", "game": 1,
         "failure": "judge reply not in the schema",
         "ab": {"winner": "beta", "reason": "ab t2 beta-gamma #1", "raw": ['{"winner": "A"}']},
         "ba": {"winner": None, "reason": "", "raw": ["not json", "not json"]},
         "duration_ms": 101},
    ]  # fmt: skip
    assert record["statistics"] == [
        {"model": "alpha", "wins": 2, "losses": 1, "draws": 1, "agreement_count": 3,
         "disagreement_count": 1},
        {"model": "beta", "wins": 1, "losses": 2, "draws": 0, "agreement_count": 3,
         "disagreement_count": 0},
        {"model": "gamma", "wins": 1, "losses": 1, "draws": 1, "agreement_count": 2,
         "disagreement_count": 1},
    ]  # fmt: skip
    # the rating rows and bootstrap metadata are games.ratings' on the resolved games,
    # with the run's seed and replicates (the failed game is not among them)
    plain = [GameResult(g.task_id, g.a, g.b, g.game, g.winner, g.agreement) for g in judge.games]
    rows, meta = ratings(plain[:5], RR, seed=5, replicates=40)
    assert record["ratings"] == rows
    assert [r["model"] for r in rows] == ["alpha", "beta", "gamma"]
    assert all(r["rating"] is not None for r in rows)
    assert sum(r["rating"] for r in rows) / 3 == pytest.approx(1500)
    assert {k: run[k] for k in meta} == meta
    assert (run["bootstrap_seed"], run["bootstrap_replicates"], run["bootstrap_clusters"]) == (
        5, 40, 2
    )  # fmt: skip
    tournament = record["tournament"]
    assert (tournament["format"], tournament["status"], tournament["best_of"]) == (
        "round-robin", "incomplete", 1
    )  # fmt: skip
    assert "opening_matchups" not in tournament
    assert tournament["candidates"] == RR
    assert [(t["task_id"], t["status"], t["champion"]) for t in tournament["tasks"]] == [
        ("t1", "complete", None), ("t2", "incomplete", None)
    ]  # fmt: skip
    assert tournament["tasks"][1]["series"][2] == series(
        1, "beta", "gamma", "failed", None, None, ["failed"]
    )


def test_the_ratings_reproduce_from_the_records_own_judgments_whatever_the_storage_order():
    # Concurrent tasks store their games interleaved, in any order: the bounds must not
    # depend on it. The record rates its games in its own order (task file, then play),
    # so rating the record's judgments again with its seed gives its bounds back.
    script = {(t, a, b): [code] for t in ("t1", "t2", "t3", "t4")
              for (a, b), code in {("alpha", "beta"): "AA", ("alpha", "gamma"): "BB",
                                   ("beta", "gamma"): "AA"}.items()}  # fmt: skip
    # each task a cycle (alpha beats beta beats gamma beats alpha), so any resample of
    # tasks rates everyone; two draws make the tasks differ
    script[("t2", "alpha", "beta")] = ["tt"]
    script[("t3", "beta", "gamma")] = ["tt"]
    tasks = [task(t) for t in ("t1", "t2", "t3", "t4")]
    judge = Judge(script)
    first = build(RR, tasks, [], judge, format=ROUND_ROBIN, seed=9, replicates=200)
    stored = list(judge.games)
    outcome = {(g.task_id, g.a, g.b, g.game): g.winner for g in stored}
    again = tournament_record(
        run=provenance(RR, 4), tasks=tasks, results=[],
        games=list(reversed(stored[:6])) + stored[9:] + stored[6:9],  # interleaved
        tournaments=[run_task(t["id"], RR, format=ROUND_ROBIN,
                              play=lambda *key: outcome[key]) for t in tasks],
        candidates=RR, judge=agent("judge"), seed=9, replicates=200, format=ROUND_ROBIN,
        best_of=1, opening=None,
    )  # fmt: skip
    assert again["ratings"] == first["ratings"]
    assert any("rating_lower" in r for r in first["ratings"])
    from_record = [
        GameResult(j["task_id"], j["model_a"], j["model_b"], j["game"],
                   {j["model_a"]: "A", j["model_b"]: "B", "tie": "tie"}[j["winner"]],
                   j["agreement"])
        for j in first["judgments"]
    ]  # fmt: skip
    rows, _ = ratings(from_record, RR, seed=9, replicates=200)
    assert rows == first["ratings"]


def test_elimination_with_a_seeded_fallback_and_a_failed_game():
    field = ["alpha", "beta", "gamma", "delta"]
    tasks = [task("t1"), task("t2")]
    judge = Judge(
        {
            # three drawn tie-breaks: the seeded fallback (seed 3) advances beta
            ("t1", "alpha", "beta"): ["tt", "AB", "tt", "BA"],
            ("t1", "gamma", "delta"): ["-A"],  # a failed game stops t1's bracket
            ("t2", "alpha", "beta"): ["AA"],
            ("t2", "gamma", "delta"): ["tt", "BB"],  # a decisive tie-break advances delta
            ("t2", "alpha", "delta"): ["BB"],
        }
    )
    record = build(field, tasks, [], judge, format=SINGLE_ELIMINATION, seed=3)
    assert valid(record) == []
    run = record["run"]
    assert coverage_of(run) == {
        "expected_pairs": 9, "resolved_pairs": 8, "failed_pairs": 1, "complete": False
    }  # fmt: skip
    assert run["orientation_agreement"]["orientation_disagreeing_pairs"] == 2
    assert record["comparisons"] == []
    assert len(record["results"]) == 8 and {r["status"] for r in record["results"]} == {"missing"}
    fallback = series(1, "alpha", "beta", "drawn", None, "beta", ["tie"], fallback=True)
    fallback["games"] += [{"game": n, "kind": "tie_break", "outcome": "tie"} for n in (2, 3, 4)]
    tie_break = series(1, "gamma", "delta", "drawn", None, "delta", ["tie"])
    tie_break["games"].append({"game": 2, "kind": "tie_break", "outcome": "B"})
    assert record["tournament"] == {
        "format": "single-elimination",
        "candidates": field,
        "best_of": 1,
        "status": "incomplete",
        "tasks": [
            {"task_id": "t1", "status": "stopped", "champion": None, "series": [
                fallback, series(1, "gamma", "delta", "failed", None, None, ["failed"]),
            ]},
            {"task_id": "t2", "status": "complete", "champion": "delta", "series": [
                series(1, "alpha", "beta", "won", "alpha", "alpha", ["A"]),
                tie_break,
                series(2, "alpha", "delta", "won", "delta", "delta", ["B"]),
            ]},
        ],
    }  # fmt: skip
    # the fallback is a tournament outcome, never a game: beta's record has no win
    beta = next(s for s in record["statistics"] if s["model"] == "beta")
    assert beta == {"model": "beta", "wins": 0, "losses": 1, "draws": 4, "agreement_count": 3,
                    "disagreement_count": 2}  # fmt: skip
    assert [(j["task_id"], j["game"], j["winner"]) for j in record["judgments"][:4]] == [
        ("t1", 1, "tie"), ("t1", 2, "tie"), ("t1", 3, "tie"), ("t1", 4, "tie")
    ]  # fmt: skip
    assert [(f["task_id"], f["model_a"], f["model_b"]) for f in record["judgment_failures"]] == [
        ("t1", "gamma", "delta")
    ]


def test_opening_matchups_are_recorded_and_played():
    field = ["alpha", "beta", "gamma", "delta"]
    opening = [("alpha", "gamma"), ("beta", "delta")]
    judge = Judge({("t1", "alpha", "gamma"): ["AA"], ("t1", "beta", "delta"): ["AA"],
                   ("t1", "alpha", "beta"): ["BB"]})  # fmt: skip
    record = build(field, [task("t1")], [], judge, format=SINGLE_ELIMINATION, opening=opening)
    assert valid(record) == []
    assert record["tournament"]["opening_matchups"] == [["alpha", "gamma"], ["beta", "delta"]]
    assert record["tournament"]["status"] == "completed"
    assert record["tournament"]["tasks"][0]["champion"] == "beta"
    assert record["run"]["complete"] is True
    # one task, and a bracket that separates: no rating, so no interval
    assert [(r["model"], r["rating"], r["unavailable"]) for r in record["ratings"]] == [
        (c, None, "separated") for c in ("alpha", "beta", "delta", "gamma")
    ]
    assert record["run"]["bootstrap_unavailable"] == "original_unrated"
    assert record["run"]["bootstrap_ran"] is False and "bootstrap_valid" not in record["run"]


def test_king_of_the_hill_with_early_stops():
    hill = ["alpha", "beta", "gamma"]
    judge = Judge(
        {
            ("t1", "alpha", "beta"): ["AA", "AA"],  # 2-0: the third game is never played
            ("t1", "alpha", "gamma"): ["BB", "AA", "BB"],
            ("t2", "alpha", "beta"): ["BB", "tt", "BB"],
            ("t2", "beta", "gamma"): ["AA", "AA"],
        }
    )
    record = build(hill, [task("t1"), task("t2")], [], judge, format=KING_OF_THE_HILL, best_of=3)
    assert valid(record) == []
    assert {k: record["run"][k] for k in ("expected_pairs", "resolved_pairs", "complete")} == {
        "expected_pairs": 10, "resolved_pairs": 10, "complete": True
    }  # fmt: skip
    assert record["tournament"]["status"] == "completed"
    assert record["tournament"]["best_of"] == 3
    assert [(t["task_id"], t["champion"]) for t in record["tournament"]["tasks"]] == [
        ("t1", "gamma"), ("t2", "beta")
    ]  # fmt: skip
    assert record["tournament"]["tasks"][0]["series"] == [
        series(1, "alpha", "beta", "won", "alpha", "alpha", ["A", "A"]),
        series(2, "alpha", "gamma", "won", "gamma", "gamma", ["B", "A", "B"]),
    ]
    assert record["tournament"]["tasks"][1]["series"][0] == series(
        1, "alpha", "beta", "won", "beta", "beta", ["B", "tie", "B"]
    )
    # gamma beat alpha, alpha beat beta, beta beat gamma: a connected cycle, all rated
    assert [r["rating"] is not None for r in record["ratings"]] == [True, True, True]


def test_a_coverage_mismatch_is_reported_not_rewritten():
    judge = Judge(RR_SCRIPT)
    record = build(RR, RR_TASKS, RR_RESULTS, judge, format=ROUND_ROBIN, drop_games=2)
    run = record["run"]
    assert coverage_of(run) == {
        "expected_pairs": 6, "resolved_pairs": 4, "failed_pairs": 0, "complete": False
    }  # fmt: skip
    assert run["coverage_error"] == "4 resolved + 0 failed games ≠ 6 expected"
    assert valid(record) == []


def test_no_judge_record():
    record = tournament_record(
        run=provenance(RR, 2), tasks=RR_TASKS, results=RR_RESULTS, games=[], tournaments=None,
        candidates=RR, judge=None, seed=9, replicates=1000, format=ROUND_ROBIN, best_of=1,
        opening=None,
    )  # fmt: skip
    assert valid(record) == []
    assert list(record) == ["schema", "run", "tasks", "results", "comparisons", "tournament"]
    assert record["schema"] == "agent-arena/tournament-record/1"
    expected_run = {k: v for k, v in provenance(RR, 2).items() if k != "judge_decoding"}
    assert record["run"] == {**expected_run, "judge": None}
    assert record["tasks"] == RR_TASKS
    assert len(record["comparisons"]) == 3
    assert record["tournament"] == {
        "format": "round-robin", "candidates": RR, "best_of": 1, "status": "not_judged",
        "tasks": [],
    }  # fmt: skip


def test_the_schema_has_teeth():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    judged = build(RR, RR_TASKS, RR_RESULTS, Judge(RR_SCRIPT), format=ROUND_ROBIN)
    plain = tournament_record(
        run=provenance(RR, 2), tasks=RR_TASKS, results=RR_RESULTS, games=[], tournaments=None,
        candidates=RR, judge=None, seed=0, replicates=10, format=ROUND_ROBIN, best_of=1,
        opening=None,
    )  # fmt: skip

    def broken(record, change) -> list[str]:
        record = copy.deepcopy(record)
        change(record)
        return valid(record)

    assert broken(judged, lambda r: r.pop("ratings")) == ["'ratings' is a required property"]
    assert broken(judged, lambda r: r["run"].pop("expected_pairs")) == [
        "'expected_pairs' is a required property"
    ]
    assert broken(judged, lambda r: r["run"].update(api_key="sk-x")) != []
    assert broken(judged, lambda r: r["judgments"][0].update(winner="")) != []
    assert broken(judged, lambda r: r["ratings"][0].update(rating=None)) != []  # no reason
    assert broken(plain, lambda r: r.update(judgments=[])) != []
    assert broken(plain, lambda r: r["run"].update(expected_pairs=0)) != []
    assert broken(plain, lambda r: r["tournament"].update(status="completed")) != []
    ran = copy.deepcopy(judged)
    ran["run"].update(bootstrap_ran=True)
    ran["run"].pop("bootstrap_valid", None)
    assert valid(ran) == ["'bootstrap_valid' is a required property"]


def test_never_a_key():
    secret = "sk-live-0123456789abcdef"
    run = provenance(RR, 2)
    run["api_key"] = secret
    run["judge_decoding"]["api_key"] = secret
    run["suite"]["token"] = secret
    run["agents"][0]["api_key"] = secret
    run["agents"][1]["headers"] = {"Authorization": f"Bearer {secret}"}
    judge = {**agent("judge"), "api_key": secret}
    tasks = [{**RR_TASKS[0], "api_key": secret}, RR_TASKS[1]]
    results = [{**RR_RESULTS[0], "api_key": secret}, *RR_RESULTS[1:]]
    scripted = Judge(RR_SCRIPT)
    tournaments = [run_task(t["id"], RR, format=ROUND_ROBIN, play=scripted) for t in tasks]
    record = tournament_record(
        run=run, tasks=tasks, results=results, games=scripted.games, tournaments=tournaments,
        candidates=RR, judge=judge, seed=0, replicates=10, format=ROUND_ROBIN, best_of=1,
        opening=None,
    )  # fmt: skip
    text = json.dumps(record)
    assert secret not in text
    assert "api_key" not in text
    assert "Authorization" not in text
    assert '"token"' not in text
    assert valid(record) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda k: k["run"].pop("suite"), "run lacks suite"),
        (lambda k: k.update(candidates=["beta", "alpha", "gamma"]),
         "agents must be the candidates' provenance, in candidate order"),
        (lambda k: k.update(judge=None), "games and tournaments need a judge (or repo tasks)"),
        (lambda k: k.update(tournaments=None), "a judged run needs its tournaments"),
        (lambda k: k["run"].pop("judge_decoding"),
         "run.judge_decoding lacks temperature, max_tokens"),
        (lambda k: k.update(results=[*RR_RESULTS, RR_RESULTS[0]]),
         "two results for task 't1', candidate 'alpha'"),
        (lambda k: k.update(format="swiss"),
         "format must be one of round-robin, single-elimination, king-of-the-hill, got 'swiss'"),
        (lambda k: k["games"].append(k["games"][0]),
         "game ('t1', 'alpha', 'beta', 1) given twice"),
    ],
)  # fmt: skip
def test_inconsistent_inputs_are_refused(change, message):
    scripted = Judge(RR_SCRIPT)
    kwargs = dict(
        run=provenance(RR, 2), tasks=RR_TASKS, results=RR_RESULTS, games=scripted.games,
        tournaments=[run_task(t["id"], RR, format=ROUND_ROBIN, play=scripted) for t in RR_TASKS],
        candidates=RR, judge=agent("judge"), seed=0, replicates=10, format=ROUND_ROBIN,
        best_of=1, opening=None,
    )  # fmt: skip
    change(kwargs)
    with pytest.raises(RecordError) as caught:
        tournament_record(**kwargs)
    assert str(caught.value) == message
