"""The refit's input as it was read before the database counted it: one row per rated
battle, in battle id order (the reference the aggregated input is checked and measured
against; tests/ratings/test_refit_aggregated.py, tests/bench/bench_refit.py)."""

import numpy as np

from ratings.selectors import rated_battles
from ratings.services import OUTCOME_Y


def per_battle_input(*, arena_id: int) -> dict:
    """Arrays a, b, y, w, cluster over the arena's rated battles in id order, with
    ``agent_ids`` (index → Agent id, by first appearance), ``battle_ids`` and ``key``
    (each battle's aggregation key: lower and higher agent id, y from the lower id's
    side, weight, cluster key)."""
    rows = list(
        rated_battles(arena_id=arena_id)
        .order_by("pk")
        .values_list(
            "pk", "agent_a_id", "agent_b_id", "outcome", "evidence_weight", "cluster_judge_id"
        )
    )
    agent_index: dict[int, int] = {}
    cluster_index: dict[int, int] = {}
    n = len(rows)
    a = np.empty(n, dtype=np.int64)
    b = np.empty(n, dtype=np.int64)
    y = np.empty(n, dtype=np.float64)
    w = np.empty(n, dtype=np.float64)
    cluster = np.empty(n, dtype=np.int64)
    keys = []
    for i, (pk, agent_a, agent_b, outcome, weight, judge) in enumerate(rows):
        weight = 1.0 if weight is None else float(weight)
        a[i] = agent_index.setdefault(agent_a, len(agent_index))
        b[i] = agent_index.setdefault(agent_b, len(agent_index))
        y[i] = OUTCOME_Y[outcome]
        w[i] = weight
        key = judge if judge is not None else -pk
        cluster[i] = cluster_index.setdefault(key, len(cluster_index))
        y_lo = y[i] if agent_a < agent_b else 1.0 - y[i]
        keys.append((min(agent_a, agent_b), max(agent_a, agent_b), y_lo, weight, key))
    return {
        "battle_ids": [row[0] for row in rows],
        "agent_ids": list(agent_index),
        "a": a,
        "b": b,
        "y": y,
        "w": w,
        "cluster": cluster,
        "key": keys,
    }
