"""Coverage of the tournaments' rating intervals, measured in simulation (docs/tournaments.md,
"How sure the bounds are"). Pure: numpy, no ORM.

Each cell of the grid draws many seeded round-robin tournaments of known truth and rates
each one as a tournament run does (``ratings.task_bootstrap.rate_games``), then counts
how often the published interval contains its target.

One tournament: ``candidates`` strengths θ drawn from N(0, 0.8²) (about 140 Elo) and
centred; ``tasks`` tasks, each playing every unordered pair of candidates once (round
robin, best of one). With **task effects**, task t shifts candidate c's strength by its
own u_tc ~ N(0, τ²), τ = 0.6 (about 100 Elo), so the games of one task are alike: a
candidate that does well on a task tends to win all its games there. A game between i
and j on task t is won by i with mean μ = σ(θ_i + u_ti − θ_j − u_tj); it is a draw with
probability 4cμ(1 − μ) (c = 0.3: 30 % draws at parity, as split orientations give), and
otherwise won by i with the probability that keeps E[y] = μ.

The target is what the fit estimates: the ratings infinitely many tasks drawn from the
same task population would give. With round robin every pair meets equally often, so it
is the Bradley–Terry fit of the expected scores p_ij = E_u[σ(θ_i − θ_j + u_i − u_j)]
(the task effects averaged over their population, as ``ratings.coverage.estimand``
averages judges' views), centred on 1500 like the estimate; without task effects it is θ
itself. Draws do not move it: they keep E[y] = μ.

A tournament without bounds is not scored (``Tally.withheld`` counts them): mostly 4
candidates on 10 tasks, where a quarter fail the resampling check — some resampling of
the tasks cannot rate a weak candidate whose few wins sit on two or three tasks — and
rarely one the full data do not rate. ``PERCENTILE`` scores the bootstrap the published
interval replaced on the same replicates, ``UNCHECKED`` the sandwich without the check.
"""

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from ratings import intervals
from ratings.bradley_terry import newton
from ratings.cells import cluster_cells
from ratings.coverage import expected_win
from ratings.task_bootstrap import percentile_bounds, rate_games

KIND = "tournament"
NOMINAL = 0.95
SPREAD = 0.8  # sd of the true strengths (θ scale)
TASK_SD = 0.6  # sd of a task's shift of one candidate's strength (θ scale)
TIES = 0.3  # draw propensity: P(draw) = 4cμ(1 − μ)
CANDIDATES = (4, 8, 16)
TASKS = (10, 30, 200)
REPLICATES = 1000  # the resampling check's replicates, as a run's default


@dataclass(frozen=True)
class Cell:
    candidates: int
    tasks: int
    task_effects: bool

    @property
    def label(self) -> str:
        effects = "task effects" if self.task_effects else "no task effects"
        return f"{self.candidates} candidates, {self.tasks} tasks, {effects}"


GRID = tuple(Cell(m, t, e) for m in CANDIDATES for t in TASKS for e in (False, True))


def draw_tournament(cell: Cell, rng: np.random.Generator):
    """(θ, a, b, y, task) of one round robin: every pair once per task."""
    m, tasks = cell.candidates, cell.tasks
    theta = rng.normal(0.0, SPREAD, m)
    theta -= theta.mean()
    i, j = np.triu_indices(m, 1)
    pairs = len(i)
    a, b = np.tile(i, tasks), np.tile(j, tasks)
    task = np.repeat(np.arange(tasks), pairs)
    d = theta[a] - theta[b]
    if cell.task_effects:
        u = rng.normal(0.0, TASK_SD, (tasks, m))
        d = d + u[task, a] - u[task, b]
    mu = 0.5 * (1.0 + np.tanh(0.5 * d))
    p_tie = 4.0 * TIES * mu * (1.0 - mu)
    tie = rng.random(len(d)) < p_tie
    won = rng.random(len(d)) < (mu - p_tie / 2.0) / np.maximum(1.0 - p_tie, 1e-12)
    y = np.where(tie, 0.5, won.astype(float))
    # who is "a" in the record does not matter to the fit; swap half of them anyway
    swap = rng.random(len(d)) < 0.5
    a, b = np.where(swap, b, a), np.where(swap, a, b)
    y = np.where(swap, 1.0 - y, y)
    return theta, a, b, y, task


def estimand(theta: np.ndarray, cell: Cell) -> np.ndarray:
    """The target on the Elo scale (1500-centred): the fit of the expected scores over
    the task population."""
    m = len(theta)
    if not cell.task_effects:
        target = theta - theta.mean()
    else:
        i, j = np.triu_indices(m, 1)
        p = expected_win(theta[i] - theta[j], 0.0, TASK_SD)
        fit = newton(i, j, np.ones(len(i)), p, n_agents=m, ridge=0.0)
        target = fit.theta - fit.theta.mean()
    return 1500.0 + intervals.ELO_SCALE * target


@dataclass
class Tally:
    """Intervals scored, and the tournaments behind them (its candidates' intervals are
    not independent draws: the Monte Carlo error is taken over tournaments)."""

    covered: int = 0
    total: int = 0
    width: float = 0.0
    squares: float = 0.0  # Σ over tournaments of (its covered count)², for the MC error
    tournaments: int = 0  # tournaments scored
    withheld: int = 0  # tournaments without bounds (not scored)

    def add(self, lower, upper, target) -> None:
        hits = int(np.sum((lower <= target) & (target <= upper)))
        self.covered += hits
        self.squares += hits * hits
        self.total += len(target)
        self.width += float(np.sum(upper - lower))
        self.tournaments += 1

    @property
    def rate(self) -> float | None:
        return self.covered / self.total if self.total else None

    @property
    def mean_halfwidth(self) -> float | None:
        return self.width / self.total / 2 if self.total else None

    @property
    def mc_error(self) -> float | None:
        """Standard error of ``rate`` over the scored tournaments (a ratio estimate:
        the spread of each tournament's covered count about rate × its candidates)."""
        k = self.tournaments
        if k < 2:
            return None
        m = self.total / k
        p = self.covered / self.total
        spread = self.squares - 2 * p * m * self.covered + k * (p * m) ** 2
        return float(np.sqrt(max(spread, 0.0) * k / (k - 1))) / (m * k)


def _edge_table(cells, m: int) -> np.ndarray:
    """G × m² flags: task g gives i positive win mass over j (the win graph's edges)."""
    table = np.zeros((cells.clusters, m * m))
    table[cells.cluster, cells.i * m + cells.j] += cells.wins > 0
    table[cells.cluster, cells.j * m + cells.i] += (cells.total - cells.wins) > 0
    return table


def resampling_check(cells, m: int, *, replicates: int, seed: int):
    """(whether every replicate rates every candidate, the replicates' multinomial
    counts): ``rate_games``' check with its draws (``bootstrap.resamples`` of
    ``cells_resampler``: one multinomial over the tasks per replicate, from ``seed``),
    decided for all replicates at once. A replicate rates everyone exactly when its win
    graph is strongly connected (``connectivity``), here by squaring the reachability
    matrices; ``tests/ratings/test_tournament_coverage.py`` checks that it agrees with
    ``rate_games`` replicate for replicate."""
    g = cells.clusters
    times = np.random.default_rng(seed).multinomial(g, np.full(g, 1.0 / g), size=replicates)
    reach = ((times > 0) @ _edge_table(cells, m)).reshape(replicates, m, m) > 0
    reach |= np.eye(m, dtype=bool)
    for _ in range(int(np.ceil(np.log2(max(m - 1, 1))))):
        reach = (reach.astype(float) @ reach.astype(float)) > 0
    return bool(reach.all()), times


def percentile_bootstrap(cells, m: int, theta: np.ndarray, times: np.ndarray) -> np.ndarray:
    """The percentile bootstrap's bounds (before issue 38) from the replicates' counts:
    every replicate refitted at once by Newton from the full fit, type-7 quantiles
    (``task_bootstrap.percentile_bounds``). Only for replicates that all rate everyone."""
    i, j = np.triu_indices(m, 1)
    pair = cells.i * m + cells.j
    pairs = np.searchsorted(i * m + j, pair)
    per_pair = np.zeros((cells.clusters, len(i)))
    np.add.at(per_pair, (cells.cluster, pairs), cells.total)
    total = times @ per_pair
    per_pair[:] = 0.0
    np.add.at(per_pair, (cells.cluster, pairs), cells.wins)
    wins = times @ per_pair
    x = np.zeros((len(i), m))
    x[np.arange(len(i)), i], x[np.arange(len(i)), j] = 1.0, -1.0
    outer = np.einsum("pa,pb->pab", x, x).reshape(len(i), m * m)
    est = np.tile(theta, (len(times), 1))
    for _ in range(60):
        d = est @ x.T
        mu = 0.5 * (1.0 + np.tanh(0.5 * d))
        grad = (wins - total * mu) @ x
        hess = ((total * mu * (1.0 - mu)) @ outer).reshape(-1, m, m) + 1.0 / m
        step = np.linalg.solve(hess, grad[..., None])[..., 0]
        step -= step.mean(axis=1, keepdims=True)
        est += step
        if np.abs(step).max() < 1e-10:
            break
    est -= est.mean(axis=1, keepdims=True)
    return percentile_bounds(1500.0 + intervals.ELO_SCALE * est)


def _bounds(fit) -> tuple[np.ndarray, np.ndarray] | None:
    """The published bounds of a ``rate_games`` result, or None when it has none."""
    if fit.unavailable is not None or any(c.lower is None for c in fit.candidates):
        return None
    return (
        np.array([c.lower for c in fit.candidates]),
        np.array([c.upper for c in fit.candidates]),
    )


PUBLISHED, PERCENTILE, UNCHECKED = (
    "published",
    "percentile bootstrap (before)",
    "published without the check",  # a diagnostic: what the resampling check withholds
)
METHODS = (PUBLISHED, PERCENTILE, UNCHECKED)


def run(
    cell: Cell,
    *,
    replications: int,
    seed: int,
    replicates: int = REPLICATES,
    methods: tuple[str, ...] = (PUBLISHED,),
    progress: Callable[[int], None] | None = None,
) -> dict[str, Tally]:
    """Coverage over ``replications`` seeded tournaments of ``cell``, per method: the
    published interval exactly as ``rate_games`` makes it with ``replicates`` resamples
    as its check (the sandwich from ``rate_games`` itself; the check, whose replicates
    only say yes or no, decided at once by ``resampling_check`` with the same draws),
    and on request the percentile bootstrap it replaced (the same replicates) and the
    sandwich without the check. Tournament k's resampling seed is seed · 100003 + k."""
    # one BLAS thread: the products here are small, and a loaded machine's BLAS threads
    # spin against each other (a full grid took minutes per cell instead of seconds)
    with threadpool_limits(limits=1):
        return _run(cell, replications, seed, replicates, methods, progress)


def _run(cell, replications, seed, replicates, methods, progress) -> dict[str, Tally]:
    rng = np.random.default_rng(seed)
    tallies = {name: Tally() for name in methods}
    m = cell.candidates
    for k in range(replications):
        theta, a, b, y, task = draw_tournament(cell, rng)
        fit = rate_games(a, b, y, task, n_candidates=m, replicates=0)
        sandwich = _bounds(fit)
        checked, times = False, None
        if all(c.rating is not None for c in fit.candidates) and fit.clusters >= 2:
            cells = cluster_cells(task, a, b, np.ones(len(a)), y, n_agents=m)
            checked, times = resampling_check(
                cells, m, replicates=replicates, seed=seed * 100_003 + k
            )
        found = {
            PUBLISHED: sandwich if checked else None,
            UNCHECKED: sandwich,
            PERCENTILE: None,
        }
        if PERCENTILE in tallies and checked:
            rating = np.array([c.rating for c in fit.candidates])
            theta_hat = (rating - 1500.0) / intervals.ELO_SCALE
            found[PERCENTILE] = tuple(percentile_bootstrap(cells, m, theta_hat, times))
        target = estimand(theta, cell)
        for name, tally in tallies.items():
            if found[name] is None:
                tally.withheld += 1
            else:
                tally.add(found[name][0], found[name][1], target)
        if progress is not None:
            progress(1)
    return tallies


def _cell_seed(seed: int, index: int) -> int:
    return seed * 1_000 + index


def grid(replications: int = 500, seed: int = 38, progress=None) -> list[dict]:
    """One row per cell of ``GRID`` (iface.md): the published interval's coverage."""
    return [row for row, _ in table(replications, seed, progress)]


def table(
    replications: int = 500, seed: int = 38, progress=None, methods=("published",)
) -> list[tuple[dict, dict[str, Tally]]]:
    """``grid``'s rows, each with the tallies of ``methods`` (for the comparison table
    of docs/tournaments.md: ``methods=METHODS``)."""
    done, total = 0, replications * len(GRID)

    def step(k: int) -> None:
        nonlocal done
        done += k
        if progress is not None:
            progress(done, total)

    out = []
    for index, cell in enumerate(GRID):
        tallies = run(
            cell, replications=replications, seed=_cell_seed(seed, index), methods=methods,
            progress=step,
        )  # fmt: skip
        tally = tallies[methods[0]]
        row = {
            "kind": KIND,
            "cell": cell.label,
            "covered": tally.covered,
            "total": tally.total,
            "replications": replications,
            "mean_halfwidth_elo": tally.mean_halfwidth,
        }
        out.append((row, tallies))
    return out


def main(argv=None) -> None:
    """``python -m ratings.tournament_coverage [replications] [seed]``: the comparison
    table of docs/tournaments.md (published interval vs the percentile bootstrap)."""
    import sys
    import time

    args = sys.argv[1:] if argv is None else argv
    replications = int(args[0]) if args else 500
    seed = int(args[1]) if len(args) > 1 else 38
    began = time.perf_counter()
    print(f"{replications} tournaments per cell, seed {seed}, {REPLICATES} resamples each")
    print(
        "| cell | published | ± MC | ± Elo | percentile bootstrap (before) | ± MC | ± Elo "
        "| no bounds | without the check | ± MC |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row, tallies in table(replications, seed, methods=METHODS):
        new, old, all_ = (tallies[name] for name in METHODS)
        print(
            f"| {row['cell']} | {new.rate:.3f} | {new.mc_error:.3f} | {new.mean_halfwidth:.0f} "
            f"| {old.rate:.3f} | {old.mc_error:.3f} | {old.mean_halfwidth:.0f} "
            f"| {new.withheld}/{replications} | {all_.rate:.3f} | {all_.mc_error:.3f} |",
            flush=True,
        )
    print(f"{time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
