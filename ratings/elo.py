"""Streaming Elo of SPEC §7.1. Pure: no ORM, no settings."""

from dataclasses import dataclass


@dataclass(frozen=True)
class EloParams:
    k_max: float = 48.0
    k_min: float = 12.0
    n0: float = 30.0


def k_factor(n: int, params: EloParams) -> float:
    """K(n) = K_min + (K_max − K_min) · n0 / (n0 + n), n = rated battles before this one."""
    return params.k_min + (params.k_max - params.k_min) * params.n0 / (params.n0 + n)


def expected(r_i: float, r_j: float) -> float:
    """E_i = 1 / (1 + 10^((R_j − R_i)/400))."""
    return 1.0 / (1.0 + 10.0 ** ((r_j - r_i) / 400.0))


def update(
    r_i: float, r_j: float, y: float, n_i: int, n_j: int, params: EloParams
) -> tuple[float, float]:
    """One resolved battle, ``y`` ∈ {1, ½, 0} from side i's view. Returns new (R_i, R_j)."""
    if y not in (0.0, 0.5, 1.0):
        raise ValueError(f"outcome must be 0, 0.5 or 1, got {y}")
    e_i = expected(r_i, r_j)
    return (
        r_i + k_factor(n_i, params) * (y - e_i),
        r_j - k_factor(n_j, params) * (y - e_i),
    )
