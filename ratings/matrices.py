"""Pairwise tables of a board: how many rated battles each pair of agents fought, and how
often the row's agent came out ahead. Pure: counts in, tables out.

A pair's battles are counted per outcome from the lower agent id's side, y = 1 a win,
0 a loss, ½ a tie or both bad (the rating's own reading of an outcome). The row agent's
win rate against the column agent is (wins + ½ · draws) / battles, so the two cells of a
pair add up to 1. Cells of a pair that never met are None, never 0: no battle is no
evidence. A matrix is square, rows and columns in the board's order.
"""

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# More agents than this and the plots are unreadable on a phone: the tables show the
# board's first MAX_AGENTS and say how many were left out.
MAX_AGENTS = 16


@dataclass(frozen=True)
class PairMatrices:
    agents: list[int]  # agent ids, the rows' and the columns' order
    battles: list[list[int]]  # battles[i][j]: rated battles between i and j (0 on the diagonal)
    win_rate: list[list[float | None]]  # row's score against the column; None: never met
    left_out: int = 0  # agents with battles not shown (beyond MAX_AGENTS)

    @property
    def total_battles(self) -> int:
        return sum(self.battles[i][j] for i in range(len(self.agents)) for j in range(i))


def pair_matrices(
    order: Sequence[int],
    pairs: Iterable[tuple[int, int, float, int]],
    *,
    max_agents: int = MAX_AGENTS,
) -> PairMatrices:
    """The tables of the agents of ``order`` that fought at least one battle in
    ``pairs`` (rows of (lower agent id, higher agent id, y from the lower's side,
    battles)), in ``order``, at most ``max_agents`` of them. Rows naming an agent
    outside ``order`` (retired agents) are ignored."""
    counts: dict[tuple[int, int], int] = {}
    score: dict[tuple[int, int], float] = {}
    for lo, hi, y, n in pairs:
        if lo > hi:
            lo, hi, y = hi, lo, 1.0 - y
        counts[(lo, hi)] = counts.get((lo, hi), 0) + n
        score[(lo, hi)] = score.get((lo, hi), 0.0) + n * y
    known = set(order)
    fought = {agent for pair in counts if known.issuperset(pair) for agent in pair}
    shown_all = [agent for agent in order if agent in fought]
    shown = shown_all[:max_agents]
    battles = [[0] * len(shown) for _ in shown]
    rates: list[list[float | None]] = [[None] * len(shown) for _ in shown]
    for i, a in enumerate(shown):
        for j, b in enumerate(shown):
            if a == b:
                continue
            key = (min(a, b), max(a, b))
            n = counts.get(key, 0)
            battles[i][j] = n
            if n:
                lower_score = score[key] / n
                rates[i][j] = round(lower_score if a < b else 1.0 - lower_score, 4)
    return PairMatrices(shown, battles, rates, left_out=len(shown_all) - len(shown))
