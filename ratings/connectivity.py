"""Identifiability of the Bradley-Terry fit (SPEC §7.4). Pure: numpy, no ORM.

A finite unpenalised maximum-likelihood estimate exists only if the directed win graph
(edge i→j when i has positive win mass over j; a tie gives ½ both ways) is strongly
connected. Agents are labelled relative to the main component: the largest strongly
connected component with at least two agents (ties broken by evidence weight, then by
the lowest agent index).
"""

from dataclasses import dataclass

import numpy as np

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
    mass = np.bincount(i, wins_i + wins_j, minlength=n_agents) + np.bincount(
        j, wins_i + wins_j, minlength=n_agents
    )
    compared = mass > 0
    labels: list[str | None] = [
        None if compared[agent] else NO_COMPARISONS for agent in range(n_agents)
    ]
    if not compared.any():
        return Diagnosis(labels, np.zeros(n_agents, dtype=bool))
    # Usually one component holds most agents: the strongly connected component of the
    # agent with the most evidence, found by two vectorised searches, is then the main
    # one. Otherwise every component is needed (Tarjan) to find the largest.
    pivot = np.zeros(n_agents, dtype=bool)
    pivot[int(np.argmax(mass))] = True
    if forward.all() and backward.all():
        # Every pair won both ways (a mature arena): the strong components are the
        # undirected ones, so one search finds the main one and nobody is ``separated``.
        fitted = reach(src, dst, pivot)
        if 2 * fitted.sum() > compared.sum():
            for agent in np.flatnonzero(compared & ~fitted).tolist():
                labels[agent] = DISCONNECTED
            return Diagnosis(labels, fitted)
    else:
        fitted = reach(src, dst, pivot) & reach(dst, src, pivot)
    if 2 * fitted.sum() <= compared.sum():
        strong = strong_components(src, dst, n_agents)
        sizes = np.bincount(strong, minlength=n_agents)
        component_mass = np.bincount(strong, mass, minlength=n_agents)
        candidates = np.flatnonzero(sizes >= 2)
        if not len(candidates):
            return Diagnosis(
                [SEPARATED if label is None else label for label in labels],
                np.zeros(n_agents, dtype=bool),
            )
        first_member = {int(c): int(np.argmax(strong == c)) for c in candidates}
        main = max(first_member, key=lambda c: (sizes[c], component_mass[c], -first_member[c]))
        fitted = strong == main
        pivot[:] = False
        pivot[first_member[main]] = True
    outside = np.flatnonzero(compared & ~fitted).tolist()
    if not outside:
        return Diagnosis(labels, fitted)
    linked = reach(np.concatenate([src, dst]), np.concatenate([dst, src]), pivot)
    for agent in outside:
        labels[agent] = SEPARATED if linked[agent] else DISCONNECTED
    return Diagnosis(labels, fitted)


def reach(src: np.ndarray, dst: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Mask of the nodes reachable from the ``start`` mask along edges src → dst
    (breadth-first, one vectorised step per level)."""
    seen = start.copy()
    frontier = start
    while frontier.any():
        step = np.zeros_like(seen)
        step[dst[frontier[src]]] = True
        frontier = step & ~seen
        seen |= step
    return seen


def strong_components(src: np.ndarray, dst: np.ndarray, n: int) -> np.ndarray:
    """Component id per node of the directed graph src → dst (iterative Tarjan,
    O(nodes + edges))."""
    order = np.argsort(src, kind="stable")
    targets = dst[order].tolist()
    start = np.searchsorted(src[order], np.arange(n + 1)).tolist()
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    component = [-1] * n
    counter = components = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, start[root])]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        while work:
            node, edge = work[-1]
            if edge < start[node + 1]:
                work[-1] = (node, edge + 1)
                nxt = targets[edge]
                if index[nxt] == -1:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack[nxt] = True
                    work.append((nxt, start[nxt]))
                elif on_stack[nxt]:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack[member] = False
                    component[member] = components
                    if member == node:
                        break
                components += 1
    return np.array(component, dtype=np.int64)
