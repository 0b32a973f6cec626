"""Uncertainty of the centred Bradley-Terry estimate (SPEC §7.3, as revised in
docs/intervals.md). Pure: numpy (scipy.special for the t quantile), no ORM.

Variances are on the natural (θ) scale, per agent (the diagonal only: that is all an
interval needs, and it costs one m × m product instead of three), built from
``A⁻¹ = (H + 11ᵀ/m)⁻¹`` (``bradley_terry.shift_fixed``): it equals H⁻¹ on every
centred quantity and exists at ridge 0. ``halfwidth`` turns a variance into a 95% Elo
half-width ``critical · (400/ln 10) · sqrt(Σ_aa)``.

- *battle*: the battle-level sandwich ``C A⁻¹ M A⁻¹ Cᵀ``, ``M = Σ_b w_b² (y_b − μ_b)² x_b
  x_bᵀ`` plus one imaginary Bernoulli battle per pair (``bradley_terry.battle_meat``),
  scaled by B/(B − (m − 1)) (B battles, m − 1 free strengths), critical value z = 1.96.
  A tie contributes what it varies (nothing at μ = ½: a tie at parity is no surprise), a
  weight w enters the variance as w², and nothing assumes y is Bernoulli.
- *clustered*: ``C A⁻¹ (G/(G−1) Σ_g s_g s_gᵀ) A⁻¹ Cᵀ``, s_g the cluster's score,
  critical value t(G* − 1) with G* the effective number of clusters (a clustered
  variance from G clusters has about G − 1 degrees of freedom, fewer when a few clusters
  hold most of the evidence; z over-states what 5 judges can tell), never narrower than
  the battle-level interval (``publish``).
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
    clusters, so its variance has the rank the centred strengths need), floored at the
    battle-level standard error taken with the same t(G − 1) critical value — votes
    within a judge are never less alike than votes of different judges, so a clustered
    standard error below the battle-level one is the noise of a few clusters, not
    information; otherwise the battle-level interval."""
    if robust_hw is None or clusters is None:
        return Choice(BATTLE, battle_hw, Z95, 0)
    critical = t95(clusters)
    floor = battle_hw
    return Choice(CLUSTERED, np.maximum(robust_hw, floor), critical, int(np.sum(floor > robust_hw)))
