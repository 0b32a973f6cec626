"""Benchmark: the rating math of SPEC §7 against the fastest peers, all measured in the
same run on the same data. Prints one JSON document.

- refit, 1,000,000 battles among 200 agents, once with binary outcomes and once with
  30 % ties: ours is ``bradley_terry.rate`` end to end (the compiled check-and-count
  pass, cells, the identifiability check, Newton, the battle-level interval), median
  of 9 runs after a warm-up, and of 21 runs taking turns with choix's (the figure the
  verdict and the ratio vs choix use: a machine whose speed drifts moves both alike),
  with its pieces (``cells.count_cells``; ``bradley_terry.newton`` on the pair sums).
  Peers, each given the fastest wins-matrix / cell build we could write in numpy (one
  ``np.bincount`` over an ordered key; two variants timed, the faster one counted):
  choix's dense ILSR (``choix.ilsr_pairwise_dense``, at alpha = 0 and at the
  ridge-equivalent alpha = r/m, see ``choix_fit``); FastChat's current fit
  (``fastchat/serve/monitor/rating_systems.py``: unique (pair, outcome) rows with
  counts, L-BFGS-B on the weighted Bradley-Terry loss; its own ``np.unique`` build is
  timed too); evalica's ``bradley_terry`` (Rust); the older FastChat ``compute_mle_elo``
  (a dense one-hot row per battle, scikit-learn ``LogisticRegression`` at C = 1/(r ln²
  10), the same objective as ours) and the same design as a sparse matrix (1–2 runs:
  they are slow). Ratios are peer ÷ ours; rating gaps are max |Δ Elo| after centring.
- bootstrap, 1,000 replicates of (100,000 battles, 50 agents): ours is
  ``rate(..., bootstrap=1000, seed=7)`` and the plain ``rate``, the replicates costing
  the difference; against evalica's ``bootstrap`` (percentile, its Bradley-Terry),
  FastChat's ``compute_bootstrap_bt`` (multinomial weights over the unique rows, one
  L-BFGS-B fit each; run in one process here, FastChat spreads it over a pool) and the
  per-battle bootstrap ours used before issue 15 (``reference_per_battle_bootstrap``:
  100,000 battles drawn per replicate with ``rng.integers``, summed per pair by
  ``bincount``, Newton warm-started from the full fit). A peer whose 1,000 replicates
  would take over ~120 s runs 100 and is scaled (``scaled_from`` says so). Issue 38's
  same-run reference is the replicate loop of issues 15–37
  (``reference_multinomial_loop``: the same seeded multinomial draws, one numpy Newton
  and one ``tied_ranks`` per replicate), timed taking turns with ours; its bands must
  equal ours exactly. The same pair for the task bootstrap (``tasks=``: 500 tasks drawn
  with replacement) on the same battles.
- extra figures at 1M × 200: ``rate`` with ``cluster`` = 200 judges, and with
  ``bootstrap=200``;
- streaming: one ``elo.update``.
Targets (issue 15): refit ≤ 0.02 s median and faster than every peer; 1,000 bootstrap
replicates of (100k, 50) ≤ 1 s (``rate`` with the bootstrap, the full fit included); a
streaming update ≤ 1 ms.

Not benchmarked: ``arena-rank`` (LMArena's package) cannot be installed next to our
numpy — it pins numpy==2.3.3 and jax.

Needs no database and no Django. Run:
OPENBLAS_NUM_THREADS=1 .venv/bin/python tests/bench/bench_ratings.py [SECTION ...]
with SECTION among refit, bootstrap, extras, streaming (default: all of them).
Every timing runs inside ``threadpoolctl.threadpool_limits(1)`` (one BLAS thread, as the
rating worker pins it), which the report states with the machine's load at start and end.
"""

import json
import math
import os
import statistics
import sys
import time
import warnings
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import choix
import evalica
import numpy as np
import threadpoolctl
from scipy import sparse
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

from ratings import bootstrap, bradley_terry, cells, elo

RIDGE = bradley_terry.RIDGE
ELO = 400 / math.log(10)  # Elo points per unit of θ
SLOW_PEER_S = 120.0  # a peer's bootstrap budget before it is run at 100 and scaled
TARGETS = {
    "refit_median_s": 0.02,
    "refit_faster_than_every_peer": True,
    "bootstrap_1000_s": 1.0,
    "streaming_update_ms": 1.0,
}


def battles(n_agents: int, n: int, seed: int, ties: float = 0.0):
    """Outcomes from the Bradley-Terry model, strengths with sd 1 (≈ 174 Elo); with
    ``ties`` > 0 that share of the battles, drawn at random, is a tie instead."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 1, n_agents)
    a = rng.integers(0, n_agents, n)
    b = (a + rng.integers(1, n_agents, n)) % n_agents
    y = (rng.random(n) < 1 / (1 + np.exp(-(theta[a] - theta[b])))).astype(float)
    if ties:
        y[rng.random(n) < ties] = 0.5
    return a, b, y


def seconds(samples: list[float]) -> dict:
    return {
        "median": round(statistics.median(samples), 5),
        "min": round(min(samples), 5),
        "max": round(max(samples), 5),
        "n": len(samples),
    }


def timed(fn, repeat: int) -> tuple[list[float], object]:
    samples, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - t)
    return samples, result


def interleaved(fns: dict, repeat: int) -> dict[str, list[float]]:
    """Seconds per run of each function, the functions taking turns run by run."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t)
    return samples


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def centred(elo_ratings: np.ndarray) -> np.ndarray:
    return elo_ratings - elo_ratings.mean()


def gap(x: np.ndarray, y: np.ndarray) -> float:
    """Max |Δ| in Elo after centring both."""
    return round(float(np.max(np.abs(centred(x) - centred(y)))), 6)


def ratings_of(result) -> np.ndarray:
    return np.array([e.rating for e in result.agents])


# --- builds: battles into a wins matrix / unique rows ---------------------------------


def outcome_table(a, b, y, n: int) -> np.ndarray:
    """n × n × 3 counts of (a, b, 2y): one unweighted bincount over an ordered key."""
    key = a * (3 * n) + b * 3 + (y * 2.0).astype(np.int64)
    return np.bincount(key, minlength=3 * n * n).reshape(n, n, 3)


def wins_matrix_outcome_key(a, b, y, n: int) -> np.ndarray:
    """M[i, j] = i's wins over j, ties half a win each way, from the outcome table."""
    t = outcome_table(a, b, y, n).astype(float)
    half = 0.5 * t[:, :, 1]
    return t[:, :, 2] + half + (t[:, :, 0] + half).T


def wins_matrix_winner_key(a, b, y, n: int) -> np.ndarray:
    """M from one bincount over winner·n + loser (plus one over the ties, halved each
    way, when there are ties)."""
    decided = y != 0.5
    key = np.where(y == 1.0, a * n + b, b * n + a)
    if decided.all():
        return np.bincount(key, minlength=n * n).reshape(n, n).astype(float)
    m = np.bincount(key[decided], minlength=n * n).reshape(n, n).astype(float)
    tied = np.bincount((a * n + b)[~decided], minlength=n * n).reshape(n, n)
    return m + 0.5 * (tied + tied.T)


def fastchat_rows_fast(a, b, y, n: int):
    """FastChat's unique (a, b, outcome) rows with counts, from the outcome table."""
    t = outcome_table(a, b, y, n)
    ia, ib, code = np.nonzero(t)
    return np.column_stack([ia, ib]), code / 2.0, t[ia, ib, code].astype(float)


def fastchat_rows_own(a, b, y):
    """FastChat's own ``preprocess_for_bt``: ``np.unique`` over the int32 schedule."""
    schedule = np.column_stack([a, b, (y * 2.0).astype(np.int64)]).astype(np.int32)
    rows, weights = np.unique(schedule, return_counts=True, axis=0)
    return rows[:, [0, 1]], rows[:, 2].astype(float) / 2.0, weights.astype(float)


# --- peers' fits ----------------------------------------------------------------------


def choix_fit(matrix: np.ndarray, alpha: float) -> np.ndarray:
    """choix's dense ILSR (default tol 1e-8 on the L1 move). Its alpha is not a Gaussian
    ridge: the fixed point is ∇ℓ_i = α m (e^θ_i − 1) with mean e^θ = 1, the stationary
    point of ℓ − α m Σ(e^θ − 1 − θ), which is (α m / 2)‖θ‖² to second order, so
    alpha = r/m is our ridge r to second order only."""
    return choix.ilsr_pairwise_dense(matrix, alpha=alpha)


def bt_loss_and_grad(ratings, matchups, outcomes, weights, alpha=1.0):
    """FastChat's rating_systems.bt_loss_and_grad."""
    matchup_ratings = ratings[matchups]
    logits = alpha * (matchup_ratings[:, 0] - matchup_ratings[:, 1])
    probs = expit(logits)
    loss = -((np.log(probs) * outcomes + np.log(1.0 - probs) * (1.0 - outcomes)) * weights).sum()
    matchups_grads = -alpha * (outcomes - probs) * weights
    model_grad = np.zeros_like(ratings)
    np.add.at(
        model_grad,
        matchups[:, [0, 1]],
        matchups_grads[:, None] * np.array([1.0, -1.0], dtype=np.float64),
    )
    return loss, model_grad


def fastchat_fit_bt(matchups, outcomes, weights, n_models: int, tol: float = 1e-6):
    """FastChat's rating_systems.fit_bt (L-BFGS-B, maxiter 100, gtol 1e-6, no penalty);
    returns Elo (400 · rating, base 10)."""
    result = minimize(
        fun=bt_loss_and_grad,
        x0=np.zeros(n_models, dtype=np.float64),
        args=(matchups, outcomes, weights, math.log(10)),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 100, "gtol": tol},
    )
    return 400 * result["x"]


def evalica_winners(y: np.ndarray) -> np.ndarray:
    return np.where(y == 1.0, evalica.Winner.X, np.where(y == 0.0, evalica.Winner.Y, 0)).astype(
        np.uint8
    )


def evalica_fit(a, b, y) -> np.ndarray:
    result = evalica.bradley_terry(a, b, evalica_winners(y))
    scores = result.scores.sort_index()
    return ELO * np.log(scores.to_numpy(dtype=float))


def sklearn_fit(a, b, y, n_agents: int, *, dense: bool) -> np.ndarray:
    """The older FastChat compute_mle_elo on its one-hot design: one row per battle, +ln
    10 in side A's column and −ln 10 in side B's, ratings = 400 · coef; a tie is a row of
    each label at weight ½ (exactly our objective)."""
    tie = y == 0.5
    if tie.any():
        a = np.concatenate([a, a[tie]])
        b = np.concatenate([b, b[tie]])
        weight = np.concatenate([np.where(tie, 0.5, 1.0), np.full(int(tie.sum()), 0.5)])
        y = np.concatenate([np.where(tie, 1.0, y), np.zeros(int(tie.sum()))])
    else:
        weight = None
    n = len(a)
    if dense:
        x = np.zeros((n, n_agents))
        x[np.arange(n), a] = math.log(10)
        x[np.arange(n), b] = -math.log(10)
    else:
        rows = np.concatenate([np.arange(n), np.arange(n)])
        values = np.concatenate([np.full(n, math.log(10)), np.full(n, -math.log(10))])
        x = sparse.csr_array((values, (rows, np.concatenate([a, b]))), shape=(n, n_agents))
    # coef = θ / ln 10, so the ridge (r/2)‖θ‖² is ‖coef‖²/(2C) at C = 1/(r ln² 10)
    model = LogisticRegression(fit_intercept=False, C=1 / (RIDGE * math.log(10) ** 2), tol=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(x, y, sample_weight=weight)
    return 400 * model.coef_[0]


# --- refit ----------------------------------------------------------------------------


def bench_refit(ties: float, seed: int) -> dict:
    n_agents, n = 200, 1_000_000
    a, b, y = battles(n_agents, n, seed=seed, ties=ties)
    rate = lambda: bradley_terry.rate(a, b, y, n_agents=n_agents)  # noqa: E731
    rate()  # warm-up: first-touch page faults and imports
    ours, result = timed(rate, 9)
    ours_elo = ratings_of(result)
    ours_mle = ratings_of(bradley_terry.rate(a, b, y, n_agents=n_agents, ridge=0.0))
    counting, cell_sums = timed(lambda: cells.count_cells(a, b, y, None, n_agents=n_agents), 9)
    pairs = cell_sums.pairs
    newton, fit = timed(
        lambda: bradley_terry.newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=n_agents),
        9,
    )

    # choix: the faster of two builds, then ILSR at alpha = 0 and at the ridge-equivalent
    builds = {
        "outcome_key_s": timed(lambda: wins_matrix_outcome_key(a, b, y, n_agents), 9),
        "winner_loser_key_s": timed(lambda: wins_matrix_winner_key(a, b, y, n_agents), 9),
    }
    assert np.array_equal(builds["outcome_key_s"][1], builds["winner_loser_key_s"][1])
    build_s = min(median(s) for s, _ in builds.values())
    matrix = builds["outcome_key_s"][1]
    alpha_equivalent = RIDGE / n_agents
    choix_mle_t, choix_mle = timed(lambda: choix_fit(matrix, 0.0), 9)
    choix_eq_t, choix_eq = timed(lambda: choix_fit(matrix, alpha_equivalent), 9)
    choix_total = build_s + min(median(choix_mle_t), median(choix_eq_t))
    # The decisive comparison, interleaved: ours and choix (its faster build and alpha)
    # alternate run by run, so a machine that speeds up or slows down mid-benchmark
    # moves both alike.
    build = min(builds, key=lambda name: median(builds[name][0]))
    build_fn = {
        "outcome_key_s": wins_matrix_outcome_key,
        "winner_loser_key_s": wins_matrix_winner_key,
    }[build]
    alpha = 0.0 if median(choix_mle_t) <= median(choix_eq_t) else alpha_equivalent
    race = interleaved(
        {
            "ours": rate,
            "choix_build_plus_ilsr": lambda: choix_fit(build_fn(a, b, y, n_agents), alpha),
        },
        21,
    )

    # FastChat today: unique rows with counts, L-BFGS-B
    own_rows_t, _ = timed(lambda: fastchat_rows_own(a, b, y), 3)
    fast_rows_t, rows = timed(lambda: fastchat_rows_fast(a, b, y, n_agents), 9)
    lbfgs_t, fastchat_elo = timed(lambda: fastchat_fit_bt(*rows, n_agents), 5)
    fastchat_total = median(fast_rows_t) + median(lbfgs_t)

    evalica_t, evalica_elo = timed(lambda: evalica_fit(a, b, y), 3)
    dense_t, dense_elo = timed(lambda: sklearn_fit(a, b, y, n_agents, dense=True), 1)
    sparse_t, sparse_elo = timed(lambda: sklearn_fit(a, b, y, n_agents, dense=False), 2)

    ours_s = median(race["ours"])
    peers = {
        "choix_ilsr": median(race["choix_build_plus_ilsr"]),
        "fastchat_lbfgs": fastchat_total,
        "evalica": median(evalica_t),
        "fastchat_dense_sklearn": median(dense_t),
        "sparse_sklearn": median(sparse_t),
    }
    return {
        "battles": n,
        "agents": n_agents,
        "tie_share": round(float(np.mean(y == 0.5)), 4),
        "pairs": len(pairs.i),
        "cells": len(cell_sums.i),
        "newton_iterations": fit.iterations,
        "ours": {
            "rate_s": seconds(ours),
            "rate_interleaved_with_choix_s": seconds(race["ours"]),
            "count_cells_s": seconds(counting),
            "newton_on_pair_sums_s": seconds(newton),
        },
        "choix_ilsr_dense": {
            "build_s": {name: seconds(s) for name, (s, _) in builds.items()},
            "build_used_s": round(build_s, 5),
            "ilsr_alpha_0_s": seconds(choix_mle_t),
            "ilsr_alpha_ridge_equivalent_s": seconds(choix_eq_t),
            "alpha_ridge_equivalent": alpha_equivalent,
            "build_plus_ilsr_s": round(choix_total, 5),
            "interleaved_with_ours_s": seconds(race["choix_build_plus_ilsr"]),
            "interleaved_build": build,
            "interleaved_alpha": alpha,
            "max_abs_elo_gap_alpha_0_vs_ours_ridge_0": gap(ELO * choix_mle, ours_mle),
            "max_abs_elo_gap_alpha_r_over_m_vs_ours": gap(ELO * choix_eq, ours_elo),
            "alpha_note": "choix's alpha is α m Σ(e^θ − 1 − θ), a ridge to second order only",
        },
        "fastchat_lbfgs": {
            "own_np_unique_build_s": seconds(own_rows_t),
            "bincount_build_s": seconds(fast_rows_t),
            "lbfgs_fit_s": seconds(lbfgs_t),
            "build_plus_fit_s": round(fastchat_total, 5),
            "max_abs_elo_gap_vs_ours_ridge_0": gap(fastchat_elo, ours_mle),
        },
        "evalica_bradley_terry": {
            "s": seconds(evalica_t),
            "max_abs_elo_gap_vs_ours_ridge_0": gap(evalica_elo, ours_mle),
        },
        "fastchat_dense_sklearn": {
            "s": seconds(dense_t),
            "max_abs_elo_gap_vs_ours": gap(dense_elo, ours_elo),
        },
        "sparse_sklearn": {
            "s": seconds(sparse_t),
            "max_abs_elo_gap_vs_ours": gap(sparse_elo, ours_elo),
        },
        "max_abs_elo_gap_ours_ridge_vs_ridge_0": gap(ours_elo, ours_mle),
        "speedup": {f"vs_{name}": round(s / ours_s, 2) for name, s in peers.items()},
        "fastest_peer": min(peers, key=peers.get),
        "refit_median_s_pass": ours_s <= TARGETS["refit_median_s"],
        "faster_than_every_peer": ours_s < min(peers.values()),
    }


# --- bootstrap ------------------------------------------------------------------------


def reference_per_battle_bootstrap(a, b, y, n_agents: int, theta: np.ndarray, replicates, seed):
    """Ours before issue 15: each replicate draws n battles with ``rng.integers``, sums
    them per pair with ``bincount``, refits by Newton warm-started from the full fit and
    ranks the agents (ties share the best and the worst rank); bands are the 2.5th
    percentile of the best ranks and the 97.5th of the worst."""
    swap = a > b
    lo, hi = np.where(swap, b, a), np.where(swap, a, b)
    y_lo = np.where(swap, 1.0 - y, y)
    pair_keys, pair = np.unique(lo * n_agents + hi, return_inverse=True)
    i, j = pair_keys // n_agents, pair_keys % n_agents
    n, n_pairs = len(a), len(pair_keys)
    rng = np.random.default_rng(seed)
    best = np.empty((replicates, n_agents), dtype=np.int64)
    worst = np.empty((replicates, n_agents), dtype=np.int64)
    for r in range(replicates):
        draw = rng.integers(0, n, n)
        p = pair[draw]
        total = np.bincount(p, minlength=n_pairs).astype(float)
        wins = np.bincount(p, y_lo[draw], minlength=n_pairs)
        fit = bradley_terry.newton(i, j, total, wins, n_agents=n_agents, ridge=RIDGE, theta0=theta)
        ordered = np.sort(fit.theta)
        best[r] = 1 + n_agents - np.searchsorted(ordered, fit.theta + 1e-8, side="right")
        worst[r] = n_agents - np.searchsorted(ordered, fit.theta - 1e-8, side="left")
    lower = np.percentile(best, 2.5, axis=0, method="lower")
    upper = np.percentile(worst, 97.5, axis=0, method="higher")
    return lower.astype(np.int64), upper.astype(np.int64)


def fastchat_bootstrap_bt(a, b, y, n_agents: int, replicates: int, seed: int) -> np.ndarray:
    """FastChat's compute_bootstrap_bt in one process: multinomial weights over the
    unique (pair, outcome) rows, one ``fit_bt`` per replicate."""
    matchups, outcomes, weights = fastchat_rows_own(a, b, y)
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n=len(a), pvals=weights / weights.sum(), size=replicates)
    boot_weights = counts.astype(np.float64) / len(a)
    return np.array([fastchat_fit_bt(matchups, outcomes, w, n_agents) for w in boot_weights])


def evalica_bootstrap(a, b, y, replicates: int, seed: int):
    return evalica.bootstrap(
        evalica.bradley_terry,
        a,
        b,
        evalica_winners(y),
        n_resamples=replicates,
        bootstrap_method="percentile",
        random_state=seed,
    )


def budgeted(run, replicates: int = 1000, probe: int = 100) -> dict:
    """Time ``run(replicates)``; when ``probe`` replicates show it would take longer than
    SLOW_PEER_S, report the probe scaled to ``replicates`` instead."""
    t = time.perf_counter()
    run(probe)
    probe_s = time.perf_counter() - t
    if probe_s * replicates / probe > SLOW_PEER_S:
        return {"s": round(probe_s * replicates / probe, 3), "scaled_from": probe}
    samples, _ = timed(lambda: run(replicates), 1)
    return {"s": round(samples[0], 3), "scaled_from": None}


def reference_multinomial_loop(draw, i, j, *, n_agents, theta, replicates, seed):
    """Our replicates from issue 15 to issue 38: one replicate at a time from the one
    seeded generator (``bootstrap.resamples``), a numpy Newton warm-started from the
    full fit, ``tied_ranks``; the bands."""
    best = np.empty((replicates, n_agents), dtype=np.int64)
    worst = np.empty((replicates, n_agents), dtype=np.int64)
    for r, (total, wins) in enumerate(bootstrap.resamples(draw, replicates=replicates, seed=seed)):
        fit = bradley_terry.newton(i, j, total, wins, n_agents=n_agents, ridge=RIDGE, theta0=theta)
        best[r], worst[r] = bootstrap.tied_ranks(fit.theta)
    return bootstrap.bands(best, worst)


def band_arrays(result) -> tuple[np.ndarray, np.ndarray]:
    return (
        np.array([e.rank_lower for e in result.agents]),
        np.array([e.rank_upper for e in result.agents]),
    )


def against_the_loop(run_ours, run_loop, replicates: int, repeat: int) -> dict:
    """Ours (``rate`` with the bootstrap, full fit included) and the replicate loop it
    replaced, taking turns run by run; their bands compared."""
    results, cpu = {}, {"ours": [], "loop": []}

    def keep(name, fn):
        def run():
            start = time.process_time()  # CPU seconds of every thread of the process
            results[name] = fn()
            cpu[name].append(time.process_time() - start)

        return run

    race = interleaved({"ours": keep("ours", run_ours), "loop": keep("loop", run_loop)}, repeat)
    ours_s, loop_s = median(race["ours"]), median(race["loop"])
    lower, upper = band_arrays(results["ours"])
    loop_lower, loop_upper = results["loop"]
    return {
        "ours_rate_with_bootstrap_s": seconds(race["ours"]),
        "reference_multinomial_loop_replicates_only_s": seconds(race["loop"]),
        "ratio_reference_over_ours": round(loop_s / ours_s, 2),
        "cpu_s": {"ours": seconds(cpu["ours"]), "reference": seconds(cpu["loop"])},
        "bands_equal_to_reference": bool(
            np.array_equal(lower, loop_lower) and np.array_equal(upper, loop_upper)
        ),
        "resamples": results["ours"].bootstrap_resamples,
        "per_replicate_ms": {
            "ours": round(ours_s / replicates * 1000, 4),
            "reference": round(loop_s / replicates * 1000, 4),
        },
    }


def bench_bootstrap() -> dict:
    n_agents, n, replicates = 50, 100_000, 1000
    a, b, y = battles(n_agents, n, seed=2)
    plain_run = lambda: bradley_terry.rate(a, b, y, n_agents=n_agents)  # noqa: E731
    plain_run()
    # warm-up: the compiled replicate loop loaded from numba's cache, the worker thread
    bradley_terry.rate(a, b, y, n_agents=n_agents, bootstrap=100, seed=7)
    plain, _ = timed(plain_run, 9)
    with_boot, result = timed(
        lambda: bradley_terry.rate(a, b, y, n_agents=n_agents, bootstrap=replicates, seed=7), 5
    )
    ours_total = median(with_boot)
    ours_replicates = ours_total - median(plain)

    # the full fit's θ, as the warm start of the references (their Newton from the cells)
    cell_sums = cells.count_cells(a, b, y, None, n_agents=n_agents)
    pairs = cell_sums.pairs
    theta = bradley_terry.newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=n_agents).theta
    load_before = os.getloadavg()[0]
    battle_race = against_the_loop(
        lambda: bradley_terry.rate(a, b, y, n_agents=n_agents, bootstrap=replicates, seed=7),
        lambda: reference_multinomial_loop(
            bootstrap.battle_resampler(cell_sums),
            pairs.i,
            pairs.j,
            n_agents=n_agents,
            theta=theta,
            replicates=replicates,
            seed=7,
        ),
        replicates,
        5,
    )
    # tasks: 500 of them, the battles dealt at random, resampled whole (tasks=)
    task = np.random.default_rng(5).integers(0, 500, n)
    tasks = bradley_terry.ClusterSums(task, a, b, np.ones(n), y)
    task_draw = bootstrap.cells_resampler(
        cells.cluster_cells(task, a, b, np.ones(n), y, n_agents=n_agents), pairs.i, pairs.j
    )
    task_race = against_the_loop(
        lambda: bradley_terry.rate(
            a, b, y, n_agents=n_agents, tasks=tasks, bootstrap=replicates, seed=7
        ),
        lambda: reference_multinomial_loop(
            task_draw,
            pairs.i,
            pairs.j,
            n_agents=n_agents,
            theta=theta,
            replicates=replicates,
            seed=7,
        ),
        replicates,
        3,
    )
    load_after = os.getloadavg()[0]

    reference_t, (ref_lower, ref_upper) = timed(
        lambda: reference_per_battle_bootstrap(a, b, y, n_agents, theta, replicates, seed=7), 2
    )
    reference_s = median(reference_t)
    fastchat = budgeted(lambda k: fastchat_bootstrap_bt(a, b, y, n_agents, k, seed=7))
    evalica_boot = budgeted(lambda k: evalica_bootstrap(a, b, y, k, seed=7))

    lower, upper = band_arrays(result)
    widths = upper - lower + 1
    issue_38 = {
        "replicates": replicates,
        "battles": n,
        "agents": n_agents,
        "ours_s": battle_race["ours_rate_with_bootstrap_s"]["median"],
        "reference_s": battle_race["reference_multinomial_loop_replicates_only_s"]["median"],
        "ratio_reference_over_ours": battle_race["ratio_reference_over_ours"],
        "cpu_s_median": {k: v["median"] for k, v in battle_race["cpu_s"].items()},
        "bands_equal_to_reference": battle_race["bands_equal_to_reference"],
        "target_s": TARGETS["bootstrap_1000_s"],
        "threads_fitting_beside_the_draws": bootstrap.THREADS,
        "load_average_1min": [round(load_before, 2), round(load_after, 2)],
    }
    return {
        "battles": n,
        "agents": n_agents,
        "replicates": replicates,
        "issue_38": issue_38,
        "ours": {
            "rate_s": seconds(plain),
            "rate_with_bootstrap_s": seconds(with_boot),
            "replicates_only_s": round(ours_replicates, 4),
            "per_replicate_ms": round(ours_replicates / replicates * 1000, 4),
            "median_rank_band_width": float(statistics.median(widths)),
            "resamples": result.bootstrap_resamples,
        },
        "against_the_replicate_loop": {"battles": battle_race, "tasks_500": task_race},
        "reference_per_battle_bootstrap": {
            "s": seconds(reference_t),
            "bands_equal_to_ours_share": round(
                float(np.mean((ref_lower == lower) & (ref_upper == upper))), 3
            ),
            "max_abs_band_end_difference": int(
                max(np.max(np.abs(ref_lower - lower)), np.max(np.abs(ref_upper - upper)))
            ),
        },
        "fastchat_bootstrap_bt_one_process": fastchat,
        "evalica_bootstrap_percentile": evalica_boot,
        "speedup": {
            "vs_reference_per_battle_bootstrap": round(reference_s / ours_replicates, 2),
            "vs_fastchat_bootstrap_bt": round(fastchat["s"] / ours_total, 2),
            "vs_evalica_bootstrap": round(evalica_boot["s"] / ours_total, 2),
        },
        "speedup_note": "the reference loop vs our replicates only; fastchat and evalica "
        "(which fit the full data too) vs our rate with the bootstrap",
        "bootstrap_1000_s_pass": ours_total <= TARGETS["bootstrap_1000_s"],
    }


# --- extras and streaming -------------------------------------------------------------


def bench_extras() -> dict:
    n_agents, n = 200, 1_000_000
    a, b, y = battles(n_agents, n, seed=1)
    judge = np.random.default_rng(3).integers(0, 200, n)
    clustered = lambda: bradley_terry.rate(a, b, y, n_agents=n_agents, cluster=judge)  # noqa: E731
    clustered()
    cluster_t, cluster_result = timed(clustered, 3)
    boot_t, boot_result = timed(
        lambda: bradley_terry.rate(a, b, y, n_agents=n_agents, bootstrap=200, seed=7), 2
    )
    return {
        "battles": n,
        "agents": n_agents,
        "rate_cluster_200_judges_s": seconds(cluster_t),
        "cluster_interval_published": cluster_result.interval,
        "rate_bootstrap_200_s": seconds(boot_t),
        "bootstrap_resamples": boot_result.bootstrap_resamples,
    }


def bench_streaming() -> dict:
    params = elo.EloParams()
    samples = []
    for k in range(20000):
        t = time.perf_counter()
        elo.update(1010.0, 990.0, (k % 3) / 2, k, k + 1, params)
        samples.append(time.perf_counter() - t)
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 5),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 5),
        "max_ms": round(ordered[-1] * 1000, 5),
        "n": len(ordered),
    }


SECTIONS = ("refit", "bootstrap", "extras", "streaming")


def main(sections: list[str]) -> None:
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; choose among {SECTIONS}")
    run = set(sections or SECTIONS)
    load = os.getloadavg()
    report: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in load],
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
            "versions": {
                name: metadata.version(name)
                for name in ("numpy", "numba", "scipy", "scikit-learn", "choix", "evalica")
            },
        }
    }
    with threadpoolctl.threadpool_limits(1):
        report["machine"]["threadpool_limits"] = [
            {"api": p["internal_api"], "num_threads": p["num_threads"]}
            for p in threadpoolctl.threadpool_info()
        ]
        if "refit" in run:
            report["refit_binary"] = bench_refit(ties=0.0, seed=1)
            report["refit_30pct_ties"] = bench_refit(ties=0.3, seed=4)
        if "bootstrap" in run:
            report["bootstrap"] = bench_bootstrap()
        if "extras" in run:
            report["extras_1m_200"] = bench_extras()
        if "streaming" in run:
            report["streaming_update"] = bench_streaming()
    report["headline"], report["pass"] = {}, {}
    if "refit" in run:
        binary, tied = report["refit_binary"], report["refit_30pct_ties"]
        report["headline"] |= {
            "refit_median_s": binary["ours"]["rate_s"]["median"],
            "speedup_vs_choix_ilsr": binary["speedup"]["vs_choix_ilsr"],
            "speedup_vs_fastchat_lbfgs": binary["speedup"]["vs_fastchat_lbfgs"],
            "speedup_vs_evalica": binary["speedup"]["vs_evalica"],
            "speedup_vs_fastchat": binary["speedup"]["vs_fastchat_dense_sklearn"],
            "speedup_vs_sparse_sklearn": binary["speedup"]["vs_sparse_sklearn"],
        }
        report["pass"] |= {
            "refit_median_s": binary["refit_median_s_pass"] and tied["refit_median_s_pass"],
            "refit_faster_than_every_peer": binary["faster_than_every_peer"]
            and tied["faster_than_every_peer"],
        }
    if "bootstrap" in run:
        report["headline"]["bootstrap_1000"] = report["bootstrap"]["issue_38"]
        report["pass"]["bootstrap_1000_s"] = report["bootstrap"]["bootstrap_1000_s_pass"]
    if "streaming" in run:
        report["pass"]["streaming_update_ms"] = (
            report["streaming_update"]["p50_ms"] <= TARGETS["streaming_update_ms"]
        )
    report["targets"] = TARGETS
    report["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
