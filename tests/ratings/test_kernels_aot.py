"""The loops compiled ahead of time (``ratings.kernels_aot``) against numba's
just-in-time ones (``ratings.kernels_numba``): the same bits for every loop and for a whole
fit, loaded without numba, never loaded from another source, releasing the GIL, and
refusing outputs they cannot write in place.

The setup builds the module in every environment that runs these tests (``scripts/setup.sh``,
with gcc): a missing build fails here, it is not skipped."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ratings import bootstrap, bradley_terry, kernels, kernels_aot, kernels_numba

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def aot():
    path = kernels_aot.path()
    assert path.exists(), f"no compiled kernels at {path}: run python -m ratings.kernels_aot build"
    kind, module = kernels._compiled()
    assert kind == "aot"
    return module


def battles(seed: int, n: int = 12, size: int = 5000):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, n, size)
    b = (a + rng.integers(1, n, size)) % n
    y = rng.choice([0.0, 0.5, 1.0], size)
    return a, b, y, rng.integers(1, 4, size)


def same(x, y) -> None:
    """Equal bit for bit, NaN included (tuples compared item by item)."""
    if isinstance(x, tuple):
        assert len(x) == len(y)
        for u, v in zip(x, y, strict=True):
            same(u, v)
        return
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    assert x.tobytes() == y.tobytes()


@pytest.mark.parametrize("seed", [1, 2])
def test_every_loop_gives_numbas_bits(aot, seed):
    a, b, y, count = battles(seed)
    y[7], a[11], b[13] = 0.25, 40, -1  # faults: an outcome, two indices
    same(aot.ordered_table(a, b, y, count, 12), kernels_numba.ordered_table(a, b, y, count, 12))
    same(
        aot.ordered_table_uncounted(a, b, y, None, 12),
        kernels_numba.ordered_table(a, b, y, None, 12),
    )
    table, _ = kernels_numba.ordered_table(a, b, y, None, 12)
    same(aot.fold(table, 12), kernels_numba.fold(table, 12))
    folded = kernels_numba.fold(table, 12)
    pi, pj, total, twice = folded[5], folded[6], folded[7] * 1.0, folded[8] * 0.5
    h = np.random.default_rng(seed).random(len(pi))
    same(aot.laplacian(pi, pj, h, 12, 0.25), kernels_numba.laplacian(pi, pj, h, 12, 0.25))
    settings = (
        bradley_terry.RIDGE, bradley_terry.TOLERANCE, bradley_terry.MAX_ITERATIONS,
        bradley_terry.ARMIJO,
    )  # fmt: skip
    for theta0 in (np.zeros(12), np.linspace(30, -30, 12)):
        same(
            aot.newton_fit(pi, pj, total, twice, theta0, *settings),
            kernels_numba.newton_fit(pi, pj, total, twice, theta0, *settings),
        )
    spd = kernels_numba.laplacian(pi, pj, h, 12, 0.25)
    rhs = np.random.default_rng(seed).normal(size=12)
    solved = []
    for solve in (aot.cholesky_solve, kernels_numba._cholesky_solve):
        factor, x = spd.copy(), np.empty(12)
        solved.append((bool(solve(factor, rhs, x)), factor, x))
    assert solved[0][0] is True
    same(solved[0][1:], solved[1][1:])
    theta = np.random.default_rng(seed).normal(size=12)
    theta[3] = theta[4]
    ranks = []
    for loop in (aot.tied_ranks, kernels_numba.tied_ranks):
        best, worst = np.empty(12, np.int64), np.empty(12, np.int64)
        loop(theta, bootstrap.TIE, best, worst)
        ranks.append((best, worst))
    same(tuple(ranks[0]), tuple(ranks[1]))


def test_the_replicate_loops_give_numbas_bits(aot):
    a, b, y, _ = battles(3, n=20, size=20000)
    rng = np.random.default_rng(5)
    table, _ = kernels_numba.ordered_table(a, b, y, None, 20)
    _, _, code, count, pair, pi, pj, pbattles, ptwice = kernels_numba.fold(table, 20)
    total, wins = count * 1.0, count * code * 0.5
    theta0 = kernels_numba.newton_fit(
        pi, pj, pbattles * 1.0, ptwice * 0.5, np.zeros(20), bradley_terry.RIDGE,
        bradley_terry.TOLERANCE, bradley_terry.MAX_ITERATIONS, bradley_terry.ARMIJO,
    )[0]  # fmt: skip
    unit = np.arange(len(count), dtype=np.int64)
    counts = rng.multinomial(len(count), np.full(len(count), 1 / len(count)), size=40)
    settings = (
        theta0, bradley_terry.RIDGE, bootstrap.TOLERANCE, bootstrap.MAX_ITERATIONS,
        bootstrap.ARMIJO, bootstrap.TIE,
    )  # fmt: skip
    results = []
    for loops in (aot, kernels_numba):
        best, worst = np.empty((40, 20), np.int64), np.empty((40, 20), np.int64)
        status = np.zeros(40, np.int64)
        loops.replicate_ranks(
            counts, unit, pair, total, wins, pi, pj, *settings, best, worst, status
        )
        sums = (counts[:, unit] * total, counts[:, unit] * wins)
        summed_total = np.zeros((40, len(pi)))
        summed_wins = np.zeros((40, len(pi)))
        for r in range(40):
            np.add.at(summed_total[r], pair, sums[0][r])
            np.add.at(summed_wins[r], pair, sums[1][r])
        best2, worst2 = np.empty((40, 20), np.int64), np.empty((40, 20), np.int64)
        status2 = np.zeros(40, np.int64)
        loops.summed_replicate_ranks(
            summed_total, summed_wins, pi, pj, *settings, best2, worst2, status2
        )
        results.append((best, worst, status, best2, worst2, status2))
    same(results[0], results[1])
    assert len(set(map(tuple, results[0][0].tolist()))) > 1  # the replicates differ


FIT = """
import hashlib, json, sys
import numpy as np
from ratings import bradley_terry, kernels
rng = np.random.default_rng(3)
n, size = 25, 60000
a = rng.integers(0, n, size)
b = (a + rng.integers(1, n, size)) % n
y = rng.choice([0.0, 0.5, 1.0], size)
judge = rng.integers(0, 70, size)
w = rng.choice([1.0, 0.5, 0.25], size)
rows = []
for weights in (None, w):
    fit = bradley_terry.rate(a, b, y, n_agents=n, w=weights, cluster=judge, bootstrap=200, seed=7)
    rows += [[e.rating, e.lower, e.upper, e.rank_lower, e.rank_upper] for e in fit.agents]
print(json.dumps({"kind": kernels.implementation(), "numba": "numba" in sys.modules,
                  "llvmlite": "llvmlite" in sys.modules, "rows": rows}))
"""


def fit_in_child(**env) -> dict:
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    done = subprocess.run(
        [sys.executable, "-c", FIT], env=environment, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_a_whole_fit_is_the_same_bits_and_needs_no_numba(aot):
    ahead = fit_in_child()
    just_in_time = fit_in_child(ARENA_KERNELS="jit")
    assert ahead["kind"] == "aot" and not ahead["numba"] and not ahead["llvmlite"]
    assert just_in_time["kind"] == "jit" and just_in_time["numba"]
    assert ahead["rows"] == just_in_time["rows"]  # floats through JSON: repr round-trips
    assert any(row[3] is not None for row in ahead["rows"])  # rank bands were fitted


def test_a_build_of_another_source_is_never_loaded(tmp_path, monkeypatch):
    # the digest names the module: a changed loop (or numpy, numba) misses the old build
    before = kernels_aot.digest()
    changed = tmp_path / "kernels_numba.py"
    changed.write_text(kernels_aot.SOURCES[0].read_text() + "\n# changed\n")
    monkeypatch.setattr(kernels_aot, "SOURCES", (changed, *kernels_aot.SOURCES[1:]))
    assert kernels_aot.digest() != before
    assert not kernels_aot.path().exists()
    kernels._compiled.cache_clear()
    try:
        assert kernels.implementation() == "jit"
    finally:
        monkeypatch.undo()
        kernels._compiled.cache_clear()
    assert kernels.implementation() == "aot"


def test_the_compiled_loops_release_the_gil(aot):
    # While one thread runs one long call, another thread's Python runs: it could not if
    # the call held the GIL (pycc's default, which the build turns off: with it, no tick
    # falls inside the call)
    rng = np.random.default_rng(9)
    m = 900  # one Newton fit of 900 agents: about 0.2 s
    i, j = np.triu_indices(m, 1)
    total = np.full(len(i), 3.0)
    wins = rng.random(len(i)) * 3.0
    span: list[float] = []

    def long_loop() -> None:
        span.append(time.perf_counter())
        aot.newton_fit(i, j, total, wins, np.zeros(m), 1e-6, 1e-12, 100, 1e-4)
        span.append(time.perf_counter())

    ticks: list[float] = []
    thread = threading.Thread(target=long_loop)
    thread.start()
    while thread.is_alive():
        ticks.append(time.perf_counter())
    thread.join()
    start, end = span
    assert end - start > 0.05, "the loop was too short to tell"
    inside = [t for t in ticks if start + 0.01 < t < end - 0.01]
    assert len(inside) > 100


def test_outputs_that_cannot_be_written_in_place_are_refused(aot):
    theta = np.arange(6.0)
    with pytest.raises(TypeError, match="C-contiguous"):
        kernels.tied_ranks(theta, 1e-8, np.empty(6, np.int32), np.empty(6, np.int64))
    with pytest.raises(TypeError, match="C-contiguous"):
        kernels.tied_ranks(theta, 1e-8, np.empty(12, np.int64)[::2], np.empty(6, np.int64))
    frozen = np.empty(6, np.int64)
    frozen.flags.writeable = False
    with pytest.raises(TypeError, match="writeable"):
        kernels.tied_ranks(theta, 1e-8, frozen, np.empty(6, np.int64))
    best, worst = np.empty(6, np.int64), np.empty(6, np.int64)
    kernels.tied_ranks(theta, 1e-8, best, worst)
    assert best.tolist() == [6, 5, 4, 3, 2, 1] and worst.tolist() == [6, 5, 4, 3, 2, 1]
