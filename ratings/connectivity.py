"""Identifiability of the Bradley-Terry fit (SPEC §7.4). Pure: numpy and scipy, no ORM.

A finite unpenalised maximum-likelihood estimate exists only if the directed win graph
(edge i→j when i has positive win mass over j; a tie gives ½ both ways) is strongly
connected. Agents are labelled relative to the main component: the largest strongly
connected component with at least two agents (ties broken by evidence weight, then by
the lowest agent index).
"""

from dataclasses import dataclass

import numpy as np
from scipy.sparse import coo_array
from scipy.sparse.csgraph import connected_components

NO_COMPARISONS = "no_comparisons"
DISCONNECTED = "disconnected"
SEPARATED = "separated"


@dataclass(frozen=True)
class Diagnosis:
    labels: list[str | None]  # per agent: None (identified) or one of the three labels
    fitted: np.ndarray  # bool mask: the agents of the main component

    @property
    def identified(self) -> int:
        return int(self.fitted.sum())


def diagnose(
    i: np.ndarray,
    j: np.ndarray,
    wins_i: np.ndarray,
    wins_j: np.ndarray,
    *,
    n_agents: int,
) -> Diagnosis:
    """Labels from per-pair win masses: ``wins_i[k]`` is the mass of i's wins over j in
    pair k (ties counted ½), ``wins_j[k]`` that of j's wins over i. An agent with no
    positive mass in any pair has ``no_comparisons``; one outside the undirected
    component of the main component is ``disconnected``; one inside it but outside the
    main component is ``separated``. When no component has two agents, every compared
    agent is ``separated``: nothing is identified."""
    i = np.asarray(i, dtype=np.int64)
    j = np.asarray(j, dtype=np.int64)
    wins_i = np.asarray(wins_i, dtype=float)
    wins_j = np.asarray(wins_j, dtype=float)
    forward, backward = wins_i > 0, wins_j > 0
    src = np.concatenate([i[forward], j[backward]])
    dst = np.concatenate([j[forward], i[backward]])
    graph = coo_array(
        (np.ones(len(src), dtype=np.int8), (src, dst)), shape=(n_agents, n_agents)
    ).tocsr()
    mass = np.bincount(i, wins_i + wins_j, minlength=n_agents) + np.bincount(
        j, wins_i + wins_j, minlength=n_agents
    )
    compared = mass > 0
    _, strong = connected_components(graph, directed=True, connection="strong")
    _, weak = connected_components(graph, directed=True, connection="weak")

    sizes = np.bincount(strong, minlength=n_agents)
    component_mass = np.bincount(strong, mass, minlength=n_agents)
    candidates = [c for c in range(len(sizes)) if sizes[c] >= 2]
    labels: list[str | None] = [None] * n_agents
    if not candidates:
        for agent in range(n_agents):
            labels[agent] = SEPARATED if compared[agent] else NO_COMPARISONS
        return Diagnosis(labels, np.zeros(n_agents, dtype=bool))
    first_member = {c: int(np.flatnonzero(strong == c)[0]) for c in candidates}
    main = max(candidates, key=lambda c: (sizes[c], component_mass[c], -first_member[c]))
    fitted = strong == main
    main_weak = weak[first_member[main]]
    for agent in range(n_agents):
        if not compared[agent]:
            labels[agent] = NO_COMPARISONS
        elif weak[agent] != main_weak:
            labels[agent] = DISCONNECTED
        elif not fitted[agent]:
            labels[agent] = SEPARATED
    return Diagnosis(labels, fitted)
