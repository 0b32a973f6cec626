"""Coverage of the board's intervals, measured in simulation (docs/intervals.md). Pure.

Each scenario draws many seeded arenas of known truth — agents' strengths, judges with
their own noise, ties, evidence weights, judges who vote a lot or a little — fits each
with ``bradley_terry.rate`` and counts how often every interval the board can show
contains its target. The interval kinds:

- ``published``: what the board shows (``intervals.publish``);
- ``battle``: the battle-level sandwich (published when G < m);
- ``clustered``: the judge-clustered sandwich with t(G* − 1) and the floor (published
  when G ≥ m); ``clustered (no floor)`` the same without the floor, a diagnostic;
- ``rank_band``: the bootstrap rank band against the agent's true rank;
- ``information (before)``, ``clustered z (before)``, ``published (before)``: the
  intervals as published before issue 15 (C H⁻¹ Cᵀ with z; the clustered one with z and
  no floor), from the same fits.

The target is what the fit estimates: the strengths an unlimited number of votes from
the same population of judges would give (the fit of the expected win rates, which
averages each judge kind's noise over the population). Where votes carry no judge noise
it is the true strength itself. Centred like the estimate.
"""

from dataclasses import dataclass, field

import numpy as np

from ratings import bradley_terry, intervals

KINDS = (
    "published",
    "battle",
    "clustered",
    "clustered (no floor)",
    "rank_band",
    "information (before)",
    "clustered z (before)",
    "published (before)",
)
NOMINAL = 0.95


@dataclass(frozen=True)
class Scenario:
    name: str
    agents: int
    battles: int
    judges: int
    spread: float = 0.8  # sd of the true strengths (θ scale; 0.8 ≈ 140 Elo)
    ties: float = 0.0  # tie propensity c: P(tie) = 4cμ(1 − μ), E[y] = μ kept
    weights: tuple[float, ...] = ()  # evidence weights drawn uniformly from these
    flips: tuple[float, ...] = (0.0,)  # judge kinds: chance a vote is a coin toss
    opinions: tuple[float, ...] = (0.0,)  # judge kinds: sd of a judge's own view of each agent
    skewed: bool = False  # judges' activity ∝ 1/rank (a few judges cast most votes)
    description: str = ""
    # A category board: the battles fall in this many task categories uniformly, an
    # agent's strength in a category is its strength plus its own N(0, category_sd²)
    # for the category, and the board is fitted on the first category's battles alone
    # (``battles`` counts the whole arena's).
    categories: int = 0
    category_sd: float = 0.0


SCENARIOS = (
    Scenario(
        "many ties, 4 judges, 6 agents",
        agents=6,
        battles=400,
        judges=4,
        ties=0.6,
        description="half the votes at parity are ties; G < m: battle-level interval",
    ),
    Scenario(
        "ties and evidence weights, 3 judges",
        agents=6,
        battles=400,
        judges=3,
        ties=0.4,
        weights=(0.25, 0.5, 1.0),
        description="weights w ∈ {¼, ½, 1} that are not counts",
    ),
    Scenario(
        "few judges of unequal noise, 8 agents",
        agents=8,
        battles=600,
        judges=4,
        ties=0.2,
        flips=(0.0, 0.1, 0.2, 0.35),
        description="judges toss a coin on 0–35% of their votes; G < m",
    ),
    Scenario(
        "5 judges with their own views, 5 agents",
        agents=5,
        battles=300,
        judges=5,
        ties=0.3,
        opinions=(0.2, 0.5, 0.9),
        description="G = m = 5: clustered interval with t(4)",
    ),
    Scenario(
        "30 judges, skewed activity, 8 agents",
        agents=8,
        battles=800,
        judges=30,
        ties=0.3,
        flips=(0.0, 0.2),
        opinions=(0.2, 0.6),
        skewed=True,
        description="a few judges cast most votes; views and noise vary",
    ),
    Scenario(
        "60 independent judges, 6 agents",
        agents=6,
        battles=600,
        judges=60,
        ties=0.3,
        description="no judge effect at all: the floor must not over-cover",
    ),
)

# Boards with about one battle per pair (issue 38): the imaginary battle that used to be
# added to every pair doubled the battle-level variance here (covered 0.995–0.998).
SPARSE = (
    Scenario(
        "20 agents, 200 votes, 4 judges",
        agents=20,
        battles=200,
        judges=4,
        ties=0.3,
        description="about one battle per pair (190 pairs); G < m: battle-level",
    ),
    Scenario(
        "20 agents, 200 votes, 40 judges",
        agents=20,
        battles=200,
        judges=40,
        ties=0.3,
        description="about one battle per pair; G ≥ m: clustered, floored at battle-level",
    ),
    Scenario(
        "50 agents, 600 votes, 4 judges",
        agents=50,
        battles=600,
        judges=4,
        ties=0.3,
        description="0.5 battles per pair (1,225 pairs); G < m: battle-level",
    ),
    Scenario(
        "50 agents, 600 votes, 60 judges",
        agents=50,
        battles=600,
        judges=60,
        ties=0.3,
        description="0.5 battles per pair; G ≥ m: clustered, floored at battle-level",
    ),
)

# Category boards: the same fit on the battles of one task category, against the
# agents' strengths in that category.
CATEGORY = (
    Scenario(
        "8 agents, 1,800 votes in 3 categories, 4 judges",
        agents=8,
        battles=1800,
        judges=4,
        ties=0.3,
        categories=3,
        category_sd=0.4,
        description="about 600 battles in the category; G < m: battle-level",
    ),
    Scenario(
        "8 agents, 2,400 votes in 3 categories, 30 skewed judges",
        agents=8,
        battles=2400,
        judges=30,
        ties=0.3,
        flips=(0.0, 0.2),
        opinions=(0.2, 0.6),
        skewed=True,
        categories=3,
        category_sd=0.4,
        description="about 800 battles in the category, judges with views; clustered",
    ),
    Scenario(
        "20 agents, 900 votes in 3 categories, 4 judges",
        agents=20,
        battles=900,
        judges=4,
        ties=0.3,
        categories=3,
        category_sd=0.4,
        description="a sparse category: about 300 battles over 190 pairs",
    ),
)

# Fewer judges than agents, with views of their own (G < m): the battle-level interval
# is all the votes support, and it misses; the board says so (``intervals.caveat``).
FEW_JUDGES = (
    Scenario(
        "4 judges with their own views, 8 agents",
        agents=8,
        battles=600,
        judges=4,
        ties=0.3,
        opinions=(0.2, 0.5, 0.9),
        description="G < m and judge effects: coverage known to fall; caveat shown",
    ),
    Scenario(
        "3 judges with their own views, 6 agents",
        agents=6,
        battles=400,
        judges=3,
        ties=0.3,
        opinions=(0.5, 0.9),
        description="G < m and judge effects: coverage known to fall; caveat shown",
    ),
)

# The coverage grid of issue 38 (``grid``): (interval kind, scenario).
GRID = (
    *(("board", s) for s in SCENARIOS),
    *(("category", s) for s in CATEGORY),
    *(("sparse board", s) for s in SPARSE),
    *(("few judges", s) for s in FEW_JUDGES),
)
# Kinds the board publishes with a caveat instead of a 95% promise (``intervals.caveat``).
CAVEATED = ("few judges",)
ALL = tuple(s for _, s in GRID)


@dataclass
class Tally:
    covered: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    total: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    width: dict[str, float] = field(default_factory=lambda: dict.fromkeys(KINDS, 0.0))

    def add(self, kind: str, lower, upper, target) -> None:
        self.covered[kind] += int(np.sum((lower <= target) & (target <= upper)))
        self.total[kind] += len(target)
        self.width[kind] += float(np.sum(upper - lower))

    def rate(self, kind: str) -> float | None:
        return self.covered[kind] / self.total[kind] if self.total[kind] else None

    def mean_halfwidth(self, kind: str) -> float | None:
        return self.width[kind] / self.total[kind] / 2 if self.total[kind] else None


def _gauss_hermite(points: int = 24) -> tuple[np.ndarray, np.ndarray]:
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)
    return nodes, weights / weights.sum()


def expected_win(d: np.ndarray, flip: float, opinion: float) -> np.ndarray:
    """E[y] for strength gap d from a judge of this kind, averaged over judges of the
    kind (their own views of the two agents differ by N(0, 2·opinion²))."""
    nodes, weights = _gauss_hermite()
    sd = np.sqrt(2.0) * opinion
    p = (1.0 / (1.0 + np.exp(-(d[..., None] + sd * nodes)))) @ weights
    return flip * 0.5 + (1.0 - flip) * p


def estimand(theta: np.ndarray, scenario: Scenario) -> np.ndarray:
    """The strengths the fit converges to with unlimited votes: pairs are drawn
    uniformly and judge kinds equally often, so it is the fit of the expected win rate
    of every pair (mean zero)."""
    n = len(theta)
    i, j = np.triu_indices(n, 1)
    kinds = [(f, o) for f in scenario.flips for o in scenario.opinions]
    p = np.mean([expected_win(theta[i] - theta[j], f, o) for f, o in kinds], axis=0)
    fit = bradley_terry.newton(i, j, np.ones(len(i)), p, n_agents=n, ridge=0.0)
    return fit.theta - fit.theta.mean()


def draw_arena(scenario: Scenario, rng: np.random.Generator):
    """(theta, a, b, y, w, judge) of one simulated arena; for a category scenario, its
    first category's strengths and battles."""
    n, g, size = scenario.agents, scenario.judges, scenario.battles
    theta = rng.normal(0.0, scenario.spread, n)
    if scenario.categories:
        category = rng.integers(0, scenario.categories, size)
        # the category's strengths; only its own battles are drawn (the others'
        # outcomes are of no concern to its board)
        theta = theta + rng.normal(0.0, scenario.category_sd, n)
        size = int(np.sum(category == 0))
    theta -= theta.mean()
    a = rng.integers(0, n, size)
    b = (a + rng.integers(1, n, size)) % n
    share = 1.0 / np.arange(1, g + 1) if scenario.skewed else np.ones(g)
    judge = rng.choice(g, size, p=share / share.sum())
    kinds = [(f, o) for f in scenario.flips for o in scenario.opinions]
    # judge kinds in turn, so every kind is present and equally common among judges
    kind = np.arange(g) % len(kinds)
    rng.shuffle(kind)
    flip = np.array([kinds[k][0] for k in kind])[judge]
    opinion = np.array([kinds[k][1] for k in kind])
    view = rng.normal(0.0, 1.0, (g, n)) * opinion[:, None]  # each judge's own view
    d = theta[a] - theta[b] + view[judge, a] - view[judge, b]
    mu = 1.0 / (1.0 + np.exp(-d))
    mu = np.where(rng.random(size) < flip, 0.5, mu)
    p_tie = 4.0 * scenario.ties * mu * (1.0 - mu)
    tie = rng.random(size) < p_tie
    # won with probability (μ − P(tie)/2)/(1 − P(tie)) among the non-ties: E[y] = μ
    won = rng.random(size) < (mu - p_tie / 2.0) / np.maximum(1.0 - p_tie, 1e-12)
    y = np.where(tie, 0.5, won.astype(float))
    w = rng.choice(np.array(scenario.weights), size) if scenario.weights else None
    return theta, a, b, y, w, judge


def run(
    scenario: Scenario,
    *,
    arenas: int,
    seed: int,
    bootstrap: int = 0,
    bootstrap_arenas: int = 0,
    progress=None,
) -> Tally:
    """Coverage of every interval kind over ``arenas`` seeded arenas; rank bands with
    ``bootstrap`` replicates on the first ``bootstrap_arenas`` of them."""
    rng = np.random.default_rng(seed)
    tally = Tally()
    for k in range(arenas):
        theta, a, b, y, w, judge = draw_arena(scenario, rng)
        if progress is not None:
            progress(1)
        replicates = bootstrap if k < bootstrap_arenas else 0
        fit = bradley_terry.rate(
            a,
            b,
            y,
            n_agents=scenario.agents,
            w=w,
            cluster=judge,
            bootstrap=replicates,
            seed=seed * 100_003 + k,
        )
        rated = np.array([e.rating is not None for e in fit.agents])
        if not rated.all():
            continue  # an arena the data do not identify: no interval to score
        target_theta = estimand(theta, scenario)
        target = bradley_terry.R0 + intervals.ELO_SCALE * target_theta
        rating = np.array([e.rating for e in fit.agents])
        tally.add(
            "published", np.array([e.lower for e in fit.agents]),
            np.array([e.upper for e in fit.agents]), target,
        )  # fmt: skip
        battle = np.array([e.model_halfwidth for e in fit.agents])
        tally.add("battle", rating - battle, rating + battle, target)
        info = np.array([e.information_halfwidth for e in fit.agents])
        tally.add("information (before)", rating - info, rating + info, target)
        before = info
        if fit.robust_published:
            robust = np.array([e.robust_halfwidth for e in fit.agents])
            floored = np.maximum(robust, battle)
            tally.add("clustered", rating - floored, rating + floored, target)
            tally.add("clustered (no floor)", rating - robust, rating + robust, target)
            z_robust = robust * intervals.Z95 / fit.critical_value
            tally.add("clustered z (before)", rating - z_robust, rating + z_robust, target)
            before = z_robust
        tally.add("published (before)", rating - before, rating + before, target)
        if replicates:
            true_rank = np.argsort(np.argsort(-target_theta)) + 1
            tally.add(
                "rank_band",
                np.array([e.rank_lower for e in fit.agents]),
                np.array([e.rank_upper for e in fit.agents]),
                true_rank,
            )
    return tally


def grid(replications: int = 500, seed: int = 38, progress=None) -> list[dict]:
    """One cell per (kind, scenario) of ``GRID`` (docs/intervals.md, "Coverage"): how
    many of the published intervals of ``replications`` seeded arenas contained their
    target, in the form of the coverage benchmark (tests/bench/bench_coverage.py).
    ``progress(done, total)`` is called as arenas finish, over the whole grid."""
    total = replications * len(GRID)
    done = 0

    def tick(_: int) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    cells = []
    for index, (kind, scenario) in enumerate(GRID):
        tally = run(scenario, arenas=replications, seed=seed * 1_000 + index, progress=tick)
        cells.append(
            {
                "kind": kind,
                "cell": scenario.name,
                "covered": tally.covered["published"],
                "total": tally.total["published"],
                "replications": replications,
                "mean_halfwidth_elo": tally.mean_halfwidth("published"),
                "interval": "clustered" if tally.total["clustered"] else "battle",
            }
        )
    return cells
