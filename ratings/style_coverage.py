"""Coverage of the style-controlled intervals (``ratings.style``), measured in
simulation for the benchmark of issue 38 (interface: /work/briefs/iface.md). Pure: numpy.

Each replication draws an arena of known truth: agents' strengths θ (sd 0.8, about
140 Elo), each agent's own verbosity (how long its final messages are: independent of
its strength, or correlated with it in one cell, where the plain board credits the
strong agents' skill partly to their length and the fit must tell them apart) and
markdown habit, uniform pairs, ties (P(tie) = 4cμ(1 − μ) with E[y] = μ
kept), and judges who — in the cells with a planted style effect — prefer the longer
message: logit P(a wins) = θ_a − θ_b + β · (len_a − len_b)/(len_a + len_b). The fit
``style.style_rate`` sees both features (length and markdown). Its model then holds
exactly, with the length coefficient β · sd(d) per sd (sd over the replication's
battles, the ``scale`` the fit reports) and the markdown coefficient 0.

Two interval kinds are scored:
- ``style-controlled``: every agent's interval against its true strength, centred on
  the mean of all agents like the fit (r0 + 400/ln 10 · (θ − mean θ));
- ``style coefficient``: each feature's coefficient interval against the planted
  coefficient (length: β · sd · 400/ln 10; markdown: 0).
A replication whose battles do not connect every agent is skipped (no interval to score).
The cells with 40 judges (independent: no judge effect) publish the judge-clustered
interval (G ≥ m + k), the others the battle-level one.
"""

from dataclasses import dataclass

import numpy as np

from ratings import intervals, style

R0 = 1500.0
NAMES = ("length", "markdown")


@dataclass(frozen=True)
class Cell:
    agents: int
    battles: int
    length_effect: float  # β on the raw normalised length difference (0: none)
    ties: float = 0.3
    spread: float = 0.8
    verbosity: float = 0.6  # sd of the agents' log length
    noise: float = 0.4  # sd of one message's log length about its agent's
    judges: int = 0  # > 0: battles dealt to that many judges, the fit clustered by judge
    correlation: float = 0.0  # of an agent's verbosity with its strength

    @property
    def label(self) -> str:
        effect = f"length effect β={self.length_effect:g}" if self.length_effect else "no effect"
        judges = f", {self.judges} judges" if self.judges else ""
        if self.correlation:
            effect += f", verbosity ~ strength (ρ={self.correlation:g})"
        return f"{self.agents} agents, {self.battles} battles{judges}, {effect}"


GRID = (
    *(
        Cell(agents, battles, effect)
        for agents in (6, 12)
        for battles in (600, 3000)
        for effect in (0.0, 2.0)
    ),
    Cell(6, 3000, 2.0, judges=40),
    Cell(12, 3000, 2.0, judges=40),
    Cell(12, 3000, 2.0, correlation=0.7),
)


def draw(cell: Cell, rng: np.random.Generator):
    """(theta, a, b, y, features_a, features_b, judge) of one simulated arena (judge
    None when the cell has no judges)."""
    n, size = cell.agents, cell.battles
    theta = rng.normal(0.0, cell.spread, n)
    theta -= theta.mean()
    own = rng.normal(0.0, 1.0, n)
    rho = cell.correlation
    verbose = cell.verbosity * (rho * theta / cell.spread + np.sqrt(1.0 - rho**2) * own)
    markdown = np.exp(rng.normal(1.0, 0.5, n))
    a = rng.integers(0, n, size)
    b = (a + rng.integers(1, n, size)) % n
    length_a = np.exp(6.0 + verbose[a] + rng.normal(0.0, cell.noise, size))
    length_b = np.exp(6.0 + verbose[b] + rng.normal(0.0, cell.noise, size))
    md_a = rng.poisson(markdown[a]).astype(float)
    md_b = rng.poisson(markdown[b]).astype(float)
    d = (length_a - length_b) / (length_a + length_b)
    mu = 1.0 / (1.0 + np.exp(-(theta[a] - theta[b] + cell.length_effect * d)))
    p_tie = 4.0 * cell.ties * mu * (1.0 - mu)
    tie = rng.random(size) < p_tie
    won = rng.random(size) < (mu - p_tie / 2.0) / np.maximum(1.0 - p_tie, 1e-12)
    y = np.where(tie, 0.5, won.astype(float))
    judge = rng.integers(0, cell.judges, size) if cell.judges else None
    return theta, a, b, y, np.c_[length_a, md_a], np.c_[length_b, md_b], judge


def run_cell(cell: Cell, *, replications: int, seed: int, progress=None) -> list[dict]:
    """The two coverage rows of one cell."""
    rng = np.random.default_rng(seed)
    tallies = {kind: [0, 0, 0.0] for kind in ("style-controlled", "style coefficient")}
    done = 0
    for _ in range(replications):
        theta, a, b, y, fa, fb, judge = draw(cell, rng)
        fit = style.style_rate(
            a,
            b,
            y,
            n_agents=cell.agents,
            features_a=fa,
            features_b=fb,
            names=NAMES,
            r0=R0,
            cluster=judge,
        )
        done += 1
        if progress is not None:
            progress(done)
        if np.isnan(fit.rating).any() or fit.names != NAMES:
            continue
        target = R0 + intervals.ELO_SCALE * (theta - theta.mean())
        planted = intervals.ELO_SCALE * np.array([cell.length_effect * fit.scale[0], 0.0])
        for kind, lower, upper, truth in (
            ("style-controlled", fit.lower, fit.upper, target),
            ("style coefficient", fit.coef_lower, fit.coef_upper, planted),
        ):
            tally = tallies[kind]
            tally[0] += int(np.sum((lower <= truth) & (truth <= upper)))
            tally[1] += len(truth)
            tally[2] += float(np.sum(upper - lower)) / 2.0
    return [
        {
            "kind": kind,
            "cell": cell.label,
            "covered": covered,
            "total": total,
            "replications": replications,
            "mean_halfwidth_elo": width / total if total else None,
        }
        for kind, (covered, total, width) in tallies.items()
    ]


def grid(replications: int = 500, seed: int = 38, progress=None) -> list[dict]:
    """One row per (cell, kind) over ``GRID`` (iface.md); ``progress(done, total)``
    as replications finish."""
    total = replications * len(GRID)
    rows = []
    for k, cell in enumerate(GRID):
        offset = k * replications

        def report(done, offset=offset):
            if progress is not None:
                progress(offset + done, total)

        rows += run_cell(cell, replications=replications, seed=seed * 1000 + k, progress=report)
    return rows
