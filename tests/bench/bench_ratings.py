"""Benchmark: the rating math of SPEC §7. Prints one JSON document.

- refit: ``bradley_terry.rate`` (validation, aggregation into per-pair sums, the
  identifiability check, Newton, model-based intervals) on 1,000,000 battles among 200
  agents, against a FastChat-style fit timed in the same run (``compute_mle_elo``: a
  dense one-hot design with +ln 10 / −ln 10 per battle row, scikit-learn
  ``LogisticRegression(fit_intercept=False, tol=1e-6)``; here with C = 1/r so both
  maximise the same objective and their answers can be compared), and the same design
  as a sparse matrix (a stronger reference than FastChat's own);
- bootstrap: ``rate(..., bootstrap=1000)`` on 100,000 battles among 50 agents (the
  full fit plus 1,000 seeded replicates);
- streaming: one ``elo.update``.
Targets (issue #7): refit ≤ 0.2 s median and ≥ 5× faster than the FastChat-style fit;
1,000 bootstrap replicates ≤ 10 s; a streaming update ≤ 1 ms.

Needs no database and no Django. Run: .venv/bin/python tests/bench/bench_ratings.py
(OPENBLAS_NUM_THREADS=1 keeps the small dense solves single-threaded, which is faster
on a busy machine; the figure is reported with the environment it ran in.)
"""

import json
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np
from scipy import sparse
from sklearn.linear_model import LogisticRegression

from ratings import bradley_terry, elo

RIDGE = bradley_terry.RIDGE
TARGETS = {
    "refit_median_s": 0.2,
    "refit_speedup_vs_fastchat": 5.0,
    "bootstrap_1000_s": 10.0,
    "streaming_update_ms": 1.0,
}


def battles(n_agents: int, n: int, seed: int):
    """Binary outcomes from the Bradley-Terry model, strengths with sd 1 (≈ 174 Elo)."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(0, 1, n_agents)
    a = rng.integers(0, n_agents, n)
    b = (a + rng.integers(1, n_agents, n)) % n_agents
    y = (rng.random(n) < 1 / (1 + np.exp(-(theta[a] - theta[b])))).astype(float)
    return a, b, y


def seconds(samples: list[float]) -> dict:
    return {
        "median": round(statistics.median(samples), 4),
        "min": round(min(samples), 4),
        "max": round(max(samples), 4),
        "n": len(samples),
    }


def timed(fn, repeat: int) -> tuple[list[float], object]:
    samples, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - t)
    return samples, result


def fastchat_fit(a, b, y, n_agents: int, *, dense: bool) -> np.ndarray:
    """FastChat's compute_mle_elo on its one-hot design: one row per battle, +ln 10 in
    side A's column and −ln 10 in side B's, ratings = 400 · coef + R0."""
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
        model.fit(x, y)
    return 400 * model.coef_[0] + 1000


def bench_refit() -> dict:
    n_agents, n = 200, 1_000_000
    a, b, y = battles(n_agents, n, seed=1)
    rate = lambda: bradley_terry.rate(a, b, y, n_agents=n_agents)  # noqa: E731
    rate()  # warm-up: first-touch page faults and imports
    ours, result = timed(rate, 9)
    w = np.ones(n)
    aggregation, pairs = timed(lambda: bradley_terry.aggregate(a, b, y, w, n_agents=n_agents), 9)
    newton, fit = timed(
        lambda: bradley_terry.newton(pairs.i, pairs.j, pairs.total, pairs.wins, n_agents=n_agents),
        9,
    )
    dense, dense_elo = timed(lambda: fastchat_fit(a, b, y, n_agents, dense=True), 2)
    sparse_t, sparse_elo = timed(lambda: fastchat_fit(a, b, y, n_agents, dense=False), 3)
    ours_elo = np.array([e.rating for e in result.agents])

    def gap(other: np.ndarray) -> float:
        return round(float(np.max(np.abs(ours_elo - (other - other.mean() + 1000)))), 6)

    return {
        "battles": n,
        "agents": n_agents,
        "pairs": len(pairs.i),
        "newton_iterations": fit.iterations,
        "rate_s": seconds(ours),
        "aggregation_only_s": seconds(aggregation),
        "newton_only_s": seconds(newton),
        "fastchat_dense_sklearn_s": seconds(dense),
        "sparse_sklearn_s": seconds(sparse_t),
        "speedup_vs_fastchat": round(statistics.median(dense) / statistics.median(ours), 1),
        "speedup_vs_sparse_sklearn": round(
            statistics.median(sparse_t) / statistics.median(ours), 1
        ),
        "max_abs_elo_gap_vs_fastchat": gap(dense_elo),
        "max_abs_elo_gap_vs_sparse_sklearn": gap(sparse_elo),
    }


def bench_bootstrap() -> dict:
    n_agents, n = 50, 100_000
    a, b, y = battles(n_agents, n, seed=2)
    samples, result = timed(
        lambda: bradley_terry.rate(a, b, y, n_agents=n_agents, bootstrap=1000, seed=7), 2
    )
    widths = [e.rank_upper - e.rank_lower + 1 for e in result.agents]
    return {
        "battles": n,
        "agents": n_agents,
        "replicates": 1000,
        "rate_with_bootstrap_s": seconds(samples),
        "per_replicate_ms": round(statistics.median(samples) / 1000 * 1000, 3),
        "median_rank_band_width": statistics.median(widths),
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


def main() -> None:
    load = os.getloadavg()
    report = {
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_1m_at_start": round(load[0], 2),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        },
        "refit": bench_refit(),
        "bootstrap": bench_bootstrap(),
        "streaming_update": bench_streaming(),
    }
    report["targets"] = TARGETS
    report["pass"] = {
        "refit_median_s": report["refit"]["rate_s"]["median"] <= TARGETS["refit_median_s"],
        "refit_speedup_vs_fastchat": report["refit"]["speedup_vs_fastchat"]
        >= TARGETS["refit_speedup_vs_fastchat"],
        "bootstrap_1000_s": report["bootstrap"]["rate_with_bootstrap_s"]["median"]
        <= TARGETS["bootstrap_1000_s"],
        "streaming_update_ms": report["streaming_update"]["p50_ms"]
        <= TARGETS["streaming_update_ms"],
    }
    report["machine"]["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
