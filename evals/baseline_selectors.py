"""Reads of a baseline-anchored evaluation: the run record's ``baseline`` section (the
judge's answers, every game with both orders' 5-level verdicts, the win rates against
the baseline with their intervals, the separability and the agreement with the human
board) and the human board's ratings of the evaluation's agents."""

from typing import Any

from agents.models import Arena
from evals import baseline
from evals.models import EvalRun, Evaluation, JudgeAnswer, PairJudgement
from evals.scorer_selectors import candidate_failed
from ratings.selectors import leaderboard_rows


def human_board_ratings(agent_ids: list[int]) -> dict[int, float]:
    """The published rating of each of these agents on the public arena's board (the
    human votes' board), for those that have one."""
    arena = Arena.objects.public()
    return {
        row["agent_id"]: row["rating"]
        for row in leaderboard_rows(arena_id=arena.pk)
        if row["agent_id"] in agent_ids and row["rating"] is not None
    }


def forfeit(candidate: EvalRun | None, anchor: EvalRun | None) -> str | None:
    """The verdict of a game with no reply to judge when one side failed through its
    own fault (``scorer_selectors.candidate_failed``) and the other replied: the side
    that failed loses strongly, in both orders. None otherwise (the arena's failure, both
    failed, or a run not made): the game is left out."""
    done = EvalRun.Status.DONE
    if candidate is None or anchor is None:
        return None
    if candidate_failed(candidate) and anchor.status == done:
        return "B>>A"
    if candidate_failed(anchor) and candidate.status == done:
        return "A>>B"
    return None


def baseline_section(evaluation: Evaluation) -> dict[str, Any]:
    """The record's ``baseline`` section (docs/evaluations.md, "Baseline-anchored
    judging"). The baseline itself is listed with a win rate of 0.5, by definition, for
    the board agreement only; separability is over the other candidates. A game whose
    side failed through its own fault counts as its strong loss (``forfeit``): an agent
    cannot avoid a loss by failing."""
    candidates = [c.agent for c in evaluation.candidates.select_related("agent")]
    anchor = evaluation.baseline
    others = [a for a in candidates if a.pk != anchor.pk]
    slug = {a.pk: a.slug for a in candidates}
    order = {t["id"]: k for k, t in enumerate(evaluation.suite.tasks)}
    stored = PairJudgement.objects.filter(evaluation=evaluation, agent_b=anchor)
    rows = sorted(stored, key=lambda p: (order.get(p.task_id, 0), p.epoch, p.agent_a_id))
    runs = {
        (r.task_id, r.agent_id, r.replicate): r
        for r in EvalRun.objects.filter(evaluation=evaluation).select_related("lane")
    }
    games, resolved, forfeits = [], [], 0
    for p in rows:
        lost = None
        if not p.winner:
            lost = forfeit(
                runs.get((p.task_id, p.agent_a_id, p.epoch)),
                runs.get((p.task_id, anchor.pk, p.epoch)),
            )
        game = {
            "task_id": p.task_id,
            "epoch": p.epoch,
            "candidate": slug[p.agent_a_id],
            "ab_level": p.ab_level,
            "ba_level": p.ba_level,
            "winner": p.winner or None,
            "agreement": p.agreement,
            "failure": p.failure,
            "forfeit": lost,
            "ab_raw": p.ab_raw,
            "ba_raw": p.ba_raw,
            "judge_model": p.judge_model,
            "duration_ms": p.duration_ms,
        }
        games.append(game)
        if p.winner:
            resolved.append(
                baseline.BaselineGame(p.task_id, game["candidate"], p.ab_level, p.ba_level)
            )
        elif lost:
            resolved.append(baseline.BaselineGame(p.task_id, game["candidate"], lost, lost))
            forfeits += 1
    rates = baseline.win_rates(resolved, [a.slug for a in others], seed=evaluation.seed)
    ours = {r["agent"]: r["win_rate"] for r in rates if r["win_rate"] is not None}
    ours[anchor.slug] = 0.5
    board = human_board_ratings([a.pk for a in candidates])
    answers = JudgeAnswer.objects.filter(evaluation=evaluation)
    return {
        "baseline": anchor.slug,
        "levels": list(baseline.LEVELS),
        "weights": baseline.WEIGHTS,
        "interval": {
            "method": baseline.METHOD,
            "description": baseline.METHOD_SENTENCE,
            "level": baseline.LEVEL,
            "replicates": baseline.REPLICATES,
            "seed": evaluation.seed,
        },
        "judge_answers": [
            {
                "task_id": a.task_id,
                "output": a.output,
                "error": a.error,
                "attempts": a.attempts,
                "duration_ms": a.duration_ms,
                "judge_model": a.judge_model,
            }
            for a in sorted(answers, key=lambda a: order.get(a.task_id, 0))
        ],
        "games": games,
        "resolved_games": len(resolved) - forfeits,
        "forfeited_games": forfeits,
        "failed_games": len(games) - len(resolved),
        "win_rates": rates,
        "separability": baseline.separability(rates),
        "human_agreement": baseline.board_agreement(
            ours, {slug[pk]: rating for pk, rating in board.items()}
        ),
    }


def baseline_record_complete(record: dict[str, Any], evaluation: Evaluation) -> None:
    """Adds the ``baseline`` section to an evaluation's record, and counts its games as
    the record's pair judgements: expected, one per candidate other than the baseline,
    judged task and epoch (every epoch, not only the first the results list) where both
    have a done run; ``complete`` then needs them all."""
    section = baseline_section(evaluation)
    judged = [t["id"] for t in evaluation.suite.tasks if t["kind"] != "repo"]
    done = set(
        EvalRun.objects.filter(
            evaluation=evaluation, task_id__in=judged, status=EvalRun.Status.DONE
        ).values_list("task_id", "agent_id", "replicate")
    )
    anchor = evaluation.baseline_id
    expected = sum(
        1 for task_id, agent, epoch in done if agent != anchor and (task_id, anchor, epoch) in done
    )
    run = record["run"]
    run["expected_pairs"] = expected
    run["complete"] = (
        run["failed_runs"] == 0
        and run["failed_criterion_scores"] == 0
        and run["missing_criterion_scores"] == 0
        and run["failed_pair_judgements"] == 0
        and run["resolved_pairs"] == expected
    )
    record["baseline"] = section
