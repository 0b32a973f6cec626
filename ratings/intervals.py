"""Uncertainty of the centred Bradley-Terry estimate (SPEC §7.3). Pure: numpy, no ORM.

All covariances are on the natural (θ) scale; ``halfwidth`` turns a variance into the
95% Elo half-width ``1.96 · (400/ln 10) · sqrt(Σ_aa)``.
"""

import math

import numpy as np

ELO_SCALE = 400.0 / math.log(10.0)
Z95 = 1.96


def centring_map(reference: np.ndarray) -> np.ndarray:
    """C with ``C θ = θ − mean(θ[reference])``: the identity minus 1 · (mask/|R|)ᵀ."""
    reference = np.asarray(reference, dtype=bool)
    if not reference.any():
        raise ValueError("centring needs at least one reference agent")
    n = len(reference)
    return np.eye(n) - np.outer(np.ones(n), reference / reference.sum())


def model_covariance(hessian_inverse: np.ndarray, centring: np.ndarray) -> np.ndarray:
    """Σ = C H⁻¹ Cᵀ, H the negative Hessian of the penalised log-likelihood at the fit."""
    return centring @ hessian_inverse @ centring.T


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


def robust_covariance(
    hessian_inverse: np.ndarray, scores: np.ndarray, centring: np.ndarray
) -> np.ndarray:
    """C V Cᵀ with V = H⁻¹ (G/(G−1) Σ_g s_g s_gᵀ) H⁻¹, the judge-clustered sandwich."""
    g = scores.shape[0]
    if g < 2:
        raise ValueError("a cluster-robust covariance needs at least two clusters")
    meat = (g / (g - 1)) * (scores.T @ scores)
    sandwich = hessian_inverse @ meat @ hessian_inverse
    return centring @ sandwich @ centring.T


def halfwidth(covariance: np.ndarray) -> np.ndarray:
    """Per-agent 95% half-widths in Elo points from the diagonal of a θ covariance."""
    return Z95 * ELO_SCALE * np.sqrt(np.clip(np.diag(covariance), 0.0, None))
