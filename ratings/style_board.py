"""Style control of a board (issue 38): ``ratings.style.style_rate`` on the battles a
board rates, one by one with their sides' style (``ratings.style_features``), beside
the plain fit and never changing it. Used by the published refit (``ratings.refit``),
the category boards and the machine board.

The style fit uses the plain fit's agents (the same indices), centring (the same
reference agents), ridge and R0, weights and judge clusters. An agent gets a
style-controlled figure only where its plain rating is published (withheld, as the
plain one, for a provisional or unplaceable agent) and the style fit placed it. A board
with no covariate measured, or fewer than two agents placed, publishes no
style-controlled figure and says why (``document["reason"]``).

Cost: the plain refit counts battles in the database; style control needs them one by
one (a covariate differs from battle to battle). It reads them only when some rated
battle has a recorded run, so a board of imported votes costs one query more than
before; a live board's battles each took minutes of sandbox time, so there are far
fewer of them than an import can hold.
"""

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from ratings.style import STYLE_FEATURES, style_rate
from ratings.style_features import FEATURES, LABELS, StyleBattles, style_battles

# Agents with a style-controlled rating a board needs to show any (as for plain ones).
STYLE_MIN_RATED = 2
NOT_ENOUGH = "not_enough"
FITTED = "fitted"
NO_RUNS = (
    "No rated battle of this board has a recorded run (imported votes carry none), so "
    "there is no style to measure."
)
NOTHING_VARIES = (
    "No style covariate could be measured on these battles: each was unknown, or the "
    "same for both sides."
)
TOO_FEW = "Fewer than two agents could be placed with style held equal."


@dataclass(frozen=True)
class StyleFit:
    """Style control of one board: ``document`` its JSON-safe table (a snapshot's
    ``style``: status, reason, battles, per covariate name, label, coef, lower, upper
    and n, the dropped ones with their reason), ``points`` agent id → (rating, lower,
    upper, rank) for the agents it places."""

    document: dict
    points: dict[int, tuple[float, float, float, int]]


def _finite(value) -> float | None:
    value = float(value)
    return value if math.isfinite(value) else None


def not_enough(reason: str, **extra) -> StyleFit:
    document = {"status": NOT_ENOUGH, "reason": reason, "battles": 0, "coefficients": [],
                "dropped": [], "rated_agents": 0, **extra}  # fmt: skip
    return StyleFit(document, {})


def style_fit(
    battles: StyleBattles | None,
    *,
    agent_ids: list[int],
    reference: np.ndarray | None,
    published: set[int],
    r0: float,
    ridge: float,
    clustered: bool = True,
) -> StyleFit:
    """The style fit of ``battles`` (None: no rated battle has a run), agents indexed
    as ``agent_ids``, centred on ``reference`` (a mask over them; None: all), the
    deciding judges as clusters unless not ``clustered`` (one machine judge). Battles of
    agents outside ``agent_ids`` (decided after the plain fit's read) are left out.
    Ranks: by style-controlled rating, best first, ties by agent id."""
    started = time.perf_counter()
    if battles is None:
        return not_enough(NO_RUNS, compute_ms=0)
    index = {agent: i for i, agent in enumerate(agent_ids)}
    pairs = zip(battles.agent_a.tolist(), battles.agent_b.tolist(), strict=True)
    inside = np.array([a in index and b in index for a, b in pairs], dtype=bool)
    features_a, features_b = battles.features_a[inside], battles.features_b[inside]
    with threadpool_limits(1):  # small dense solves, as the plain fit's
        style = style_rate(
            np.array([index[x] for x in battles.agent_a[inside].tolist()], dtype=np.int64),
            np.array([index[x] for x in battles.agent_b[inside].tolist()], dtype=np.int64),
            battles.y[inside],
            n_agents=len(agent_ids),
            features_a=features_a,
            features_b=features_b,
            w=battles.w[inside],
            cluster=battles.cluster[inside] if clustered else None,
            r0=r0,
            names=battles.names,
            reference=reference,
            ridge=ridge,
        )
    both = ~np.isnan(features_a) & ~np.isnan(features_b)
    measured = {name: int(both[:, j].sum()) for j, name in enumerate(battles.names)}
    figures = {}
    for agent, i in index.items():
        values = (style.rating[i], style.lower[i], style.upper[i])
        if agent in published and all(math.isfinite(v) for v in values):
            figures[agent] = tuple(float(v) for v in values)
    ranked = sorted(figures, key=lambda agent: (-figures[agent][0], agent))
    points = {agent: (*figures[agent], rank) for rank, agent in enumerate(ranked, start=1)}
    reason = NOTHING_VARIES if not style.names else TOO_FEW if len(points) < STYLE_MIN_RATED else ""
    if reason:
        points = {}
    coefficients = [
        {
            "name": name,
            "label": LABELS.get(name, name),
            "coef": _finite(coef),
            "lower": _finite(low),
            "upper": _finite(high),
            "n": measured.get(name, 0),
        }
        for name, coef, low, high in zip(
            style.names, style.coef, style.coef_lower, style.coef_upper, strict=True
        )
    ]
    document = {
        "status": NOT_ENOUGH if reason else FITTED,
        "reason": reason,
        "battles": style.n_battles,
        "measured": measured,
        "interval": style.interval,
        "critical_value": _finite(style.critical_value),
        "clusters": style.clusters,
        "converged": bool(style.converged),
        "coefficients": coefficients,
        "dropped": [
            {"name": name, "label": LABELS.get(name, name), "reason": why}
            for name, why in style.dropped.items()
        ],
        "rated_agents": len(points),
        "compute_ms": round((time.perf_counter() - started) * 1000),
    }
    return StyleFit(document, points)


def board_style(
    *,
    arena_id: int,
    agent_ids: list[int],
    reference: np.ndarray | None,
    published: set[int],
    r0: float,
    ridge: float,
    category: str | None = None,
) -> StyleFit:
    """Style control of the arena's board (``category``'s, when given): its rated
    battles read one by one (``style_features.style_battles``, not at all when none
    has a run) and fitted by ``style_fit``; compute_ms counts the read too."""
    started = time.perf_counter()
    battles = style_battles(arena_id=arena_id, category=category, names=STYLE_FEATURES)
    result = style_fit(battles, agent_ids=agent_ids, reference=reference,
                       published=published, r0=r0, ridge=ridge)  # fmt: skip
    result.document["compute_ms"] = round((time.perf_counter() - started) * 1000)
    return result


def style_covariates(style: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Every covariate style control measures, in order, with its coefficient and
    interval when the fit kept it, else why it was dropped (or None: not fitted)."""
    style = style or {}
    kept = {c["name"]: c for c in style.get("coefficients", [])}
    dropped = {d["name"]: d["reason"] for d in style.get("dropped", [])}
    measured = style.get("measured") or {}
    return [
        {"name": name, "label": LABELS[name], "measured": measured.get(name),
         "coefficient": kept.get(name), "dropped": dropped.get(name)}
        for name in FEATURES
    ]  # fmt: skip
