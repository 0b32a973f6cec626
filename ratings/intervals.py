"""Uncertainty of the centred Bradley-Terry estimate (SPEC §7.3, as revised in
docs/intervals.md). Pure: numpy (scipy.special for the t quantile), no ORM.

Variances are on the natural (θ) scale, per agent (the diagonal only: that is all an
interval needs, and it costs one m × m product instead of three), built from
``A⁻¹ = (H + 11ᵀ/m)⁻¹`` (``bradley_terry.shift_fixed``): it equals H⁻¹ on every
centred quantity and exists at ridge 0. ``halfwidth`` turns a variance into a 95% Elo
half-width ``critical · (400/ln 10) · sqrt(Σ_aa)``.

- *battle*: the battle-level sandwich ``C A⁻¹ M A⁻¹ Cᵀ``, ``M = Σ_b w_b² (y_b − μ_b)² x_b
  x_bᵀ`` with each pair's sum shrunk towards the board's measured variance by one
  imaginary battle among the pair's own (``pair_meat``), scaled by B/(B − (m − 1)) (B
  battles, m − 1 free strengths), critical value z = 1.96. A tie contributes what it
  varies (nothing at μ = ½: a tie at parity is no surprise), a weight w enters the
  variance as w², and nothing assumes y is Bernoulli.
- *clustered*: ``C A⁻¹ (G/(G−1) Σ_g s_g s_gᵀ) A⁻¹ Cᵀ``, s_g the cluster's score,
  critical value t(G* − 1) with G* the effective number of clusters (a clustered
  variance from G clusters has about G − 1 degrees of freedom, fewer when a few clusters
  hold most of the evidence; z over-states what 5 judges can tell), never narrower than
  the battle-level interval as published, with z (``publish``).

``caveat`` is the board's one rule for saying, beside the interval, when its coverage is
known to fall short (fewer judges than agents: judges' own views go unmeasured).
"""

import math
from dataclasses import dataclass

import numpy as np

ELO_SCALE = 400.0 / math.log(10.0)
Z95 = 1.96  # SPEC §7.3 (the normal quantile to two decimals)
BATTLE = "battle"  # the battle-level sandwich
CLUSTERED = "clustered"  # the cluster-robust sandwich


def t95(clusters: float) -> float:
    """The two-sided 95% critical value of t with G − 1 degrees of freedom (G may be
    fractional: an effective number of clusters)."""
    if clusters <= 1:
        raise ValueError("a clustered interval needs more than one cluster")
    # imported here: scipy.special takes most of a second to import, and the web
    # processes that import this module for the board never need a t quantile
    from scipy.special import stdtrit

    return float(stdtrit(clusters - 1.0, 0.975))


def effective_clusters(mass: np.ndarray) -> float:
    """(Σ n_g)² / Σ n_g² over the clusters' evidence masses: G when every cluster holds
    the same share, fewer when a few clusters hold most of it (a judge who casts half
    the votes is one cluster that decides half the variance)."""
    mass = np.asarray(mass, dtype=float)
    square = float(mass @ mass)
    return float(mass.sum()) ** 2 / square if square > 0 else 0.0


def centring_map(reference: np.ndarray) -> np.ndarray:
    """C with ``C θ = θ − mean(θ[reference])``: the identity minus 1 · (mask/|R|)ᵀ."""
    reference = np.asarray(reference, dtype=bool)
    if not reference.any():
        raise ValueError("centring needs at least one reference agent")
    n = len(reference)
    return np.eye(n) - np.outer(np.ones(n), reference / reference.sum())


def bread(hessian_inverse: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """C A⁻¹ without a matrix product: C = I − 1 rᵀ (r the reference mask over |R|), so
    C X = X − 1 (rᵀ X)."""
    r = reference / reference.sum()
    return hessian_inverse - np.outer(np.ones(len(r)), r @ hessian_inverse)


def information_variance(bread_: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """diag(C A⁻¹ Cᵀ): the textbook information-based variance (every outcome a
    Bernoulli draw, every weight a count)."""
    r = reference / reference.sum()
    return np.diag(bread_) - bread_ @ r


def sandwich_variance(bread_: np.ndarray, meat: np.ndarray) -> np.ndarray:
    """diag(C A⁻¹ M A⁻¹ Cᵀ) = row sums of (B M) ∘ B, B = C A⁻¹ (M symmetric)."""
    return np.einsum("ij,ij->i", bread_ @ meat, bread_)


# Imaginary battles at full Bernoulli variance in the board's dispersion (``pair_meat``):
# the rule of three, so a board of nothing but ties does not claim certainty.
DISPERSION_PRIOR = 3.0


def pair_meat(spread: np.ndarray, bernoulli: np.ndarray, battles: np.ndarray) -> np.ndarray:
    """Per pair, the battle-level meat: ``n/(n + 1) · (s_p + φ · v_p/n)``.

    ``spread`` s_p = Σ_b w_b² (y_b − μ)² over the pair's n battles; ``bernoulli`` v_p =
    Σ_b w_b² μ(1 − μ), what the same battles would vary if every one were a coin flip
    with no ties. φ = (Σ s + 3 v̄)/(Σ v + 3 v̄), v̄ the mean v per battle: the share of
    Bernoulli variance the votes actually show, measured on the whole board (ties make
    it smaller), with three imaginary coin flips so that a board of nothing but ties
    does not claim certainty. A pair's variance is then its own battles' plus one
    imaginary battle at the board's measured variance, averaged over n + 1: unbiased
    when the pair is like the board, and a pair seen a few times, all ties, does not
    claim certainty either.

    Before issue 38 the imaginary battle (at φ = 1) was *added* to the pair's battles:
    with about one battle per pair it doubled the variance and the intervals covered
    0.995 (docs/intervals.md, "Coverage")."""
    battles = np.asarray(battles, dtype=float)
    total = float(battles.sum())
    prior = DISPERSION_PRIOR * float(bernoulli.sum()) / total if total > 0 else 0.0
    denominator = float(bernoulli.sum()) + prior
    phi = (float(spread.sum()) + prior) / denominator if denominator > 0 else 1.0
    n = np.maximum(battles, 1.0)
    return battles / (battles + 1.0) * (spread + phi * bernoulli / n)


def battle_variance(bread_: np.ndarray, meat: np.ndarray, *, battles: int, free: int):
    """The battle-level sandwich's diagonal with the B/(B − free) factor (HC1)."""
    variance = sandwich_variance(bread_, meat)
    if battles <= free:  # no battle left to estimate a variance from
        return np.full_like(variance, np.inf)
    return (battles / (battles - free)) * variance


def cluster_scores(
    cluster_index: np.ndarray,
    i: np.ndarray,
    j: np.ndarray,
    residual: np.ndarray,
    *,
    n_clusters: int,
    n_agents: int,
) -> np.ndarray:
    """s_g = Σ_{b∈g} w_b (y_b − μ_b) x_b as a G × n matrix, from residuals
    ``w (y − μ)`` already summed per (cluster, pair) row; x_b = e_i − e_j."""
    size = n_clusters * n_agents
    plus = np.bincount(cluster_index * n_agents + i, residual, minlength=size)
    minus = np.bincount(cluster_index * n_agents + j, residual, minlength=size)
    return (plus - minus).reshape(n_clusters, n_agents)


def robust_variance(bread_: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """diag of C A⁻¹ (G/(G−1) Σ_g s_g s_gᵀ) A⁻¹ Cᵀ: column sums of squares of S Bᵀ."""
    g = scores.shape[0]
    if g < 2:
        raise ValueError("a cluster-robust covariance needs at least two clusters")
    projected = scores @ bread_.T
    return (g / (g - 1)) * np.einsum("gi,gi->i", projected, projected)


def halfwidth(variance: np.ndarray, critical: float = Z95) -> np.ndarray:
    """Per-agent 95% half-widths in Elo points from θ variances."""
    return critical * ELO_SCALE * np.sqrt(np.clip(variance, 0.0, None))


@dataclass(frozen=True)
class Choice:
    """The published interval: its kind, per-agent half-widths, critical value, and how
    many agents got the floor instead of their clustered half-width."""

    kind: str
    halfwidth: np.ndarray
    critical: float
    floored: int


def publish(
    battle_hw: np.ndarray, robust_hw: np.ndarray | None, *, clusters: float | None
) -> Choice:
    """The rule of docs/intervals.md: the clustered interval when there is one (G ≥ m
    clusters, so its variance has the rank the centred strengths need), never narrower
    than the battle-level interval as published (``battle_hw``, taken with z) — votes
    within a judge are never less alike than votes of different judges, so a clustered
    interval narrower than the battle-level one is the noise of a few clusters, not
    information; otherwise the battle-level interval.

    The floor is taken with z, not with the clustered interval's t(G* − 1): measured in
    issue 38 (500 arenas per cell, docs/intervals.md), a floor with t covered 0.979 with
    5 judges for 5 agents (z: 0.967), and 0.966 and 0.963 on the sparse boards with 40
    and 60 judges (z: 0.960, 0.959); with no floor those sparse boards covered 0.939
    and 0.940, so the floor is needed, with z."""
    if robust_hw is None or clusters is None:
        return Choice(BATTLE, battle_hw, Z95, 0)
    critical = t95(clusters)
    floor = battle_hw
    return Choice(CLUSTERED, np.maximum(robust_hw, floor), critical, int(np.sum(floor > robust_hw)))


def caveat(*, interval: str | None, judges: int | None, agents: int | None = None) -> str | None:
    """What the board says beside its intervals when their coverage is known to fall
    short, in plain words; None when it has nothing to add.

    The battle-level interval is published while there are fewer judges than agents
    (G < m; ``publish``). It treats every vote as a separate piece of evidence, so it
    cannot see judges who hold views of their own about particular agents, and with so
    few judges nothing in the votes can measure those views: in simulation such
    intervals contained their target 57 to 69 times in 100 instead of 95
    (docs/intervals.md, "Coverage", the few-judges cells). The rule reads only what
    the snapshot records: the kind of interval published and how many judges decided
    its battles (``RatingSnapshot.interval``, ``clusters``); ``agents`` only adds the
    count to the sentence. Without judges on record (an import that names none) there
    is nothing to say which kind of evidence it is, and nothing is said."""
    if interval != BATTLE or not judges:
        return None
    who = f"{judges} judge{'s' if judges != 1 else ''}"
    who += f" for {agents} agents" if agents else ", fewer than the agents they rate,"
    return (
        f"Only {who} decided these battles. The intervals assume the judges share one "
        "view of the agents; if some judges favour particular agents, the true "
        "uncertainty is larger than shown. More judges are the remedy."
    )


def board_caveat(board: dict) -> str | None:
    """``caveat`` for a board document (``ratings.selectors.board_context``): a
    category's own fit when the board is a category's, else the published snapshot's
    (the refit status: ``interval``, ``clusters``)."""
    category = board.get("category")
    if category is not None:
        if not category.get("enough"):
            return None
        kind = CLUSTERED if category.get("robust_intervals") else BATTLE
        return caveat(interval=kind, judges=category.get("clusters"))
    refit = board.get("refit") or {}
    return caveat(interval=refit.get("interval"), judges=refit.get("clusters"))
