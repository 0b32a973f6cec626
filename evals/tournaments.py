"""Tournaments of judged games (003 "Tournaments"): who meets whom on a task, series of
best-of-N games, elimination tie-breaks and the seeded fallback. Pure: no ORM, no
provider; the caller's ``play`` judges one game.

Terms: a *game* is one judged evaluation of a task's two replies (both orientations,
resolved to "A", "B", "tie", or "failed" for a game that failed for good); a *series*
is one contest between two candidates, of one or more games; each task runs its own
tournament of series in the chosen format.

- Round robin: every unordered pair of candidates, in candidate order, plays one
  series per task; a drawn series stays drawn; a failed game ends its series (failed)
  and the other series still play.
- Single elimination: a power-of-two field; the first round pairs adjacent candidates
  (or the opening matchups given), winners advance until a champion remains. A drawn
  series plays up to three tie-break games one at a time, the first decisive one
  advancing; after three drawn tie-breaks the seeded fallback advances one side (marked
  ``seeded_fallback``, never a judged win). A failed game stops the task's bracket:
  no further game is played and there is no champion.
- King of the hill: candidates challenge in order; the holder meets the next
  challenger and stays on a series win; the final holder is the champion. Tie-breaks,
  fallback and failure as in single elimination.

Best-of-N: N odd; a series stops once a side reaches N // 2 + 1 wins, or as soon as
neither side can still reach it (a draw); drawn games count for nobody.
"""

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

ROUND_ROBIN, SINGLE_ELIMINATION, KING_OF_THE_HILL = (
    "round-robin",
    "single-elimination",
    "king-of-the-hill",
)
FORMATS = (ROUND_ROBIN, SINGLE_ELIMINATION, KING_OF_THE_HILL)
TIE_BREAKS = 3
OUTCOMES = ("A", "B", "tie", "failed")

# play(task_id, a, b, game) → "A" (a won), "B", "tie" or "failed"; ``game`` is the
# game's number in its series (1, 2, ...), regulation games first, then tie-breaks.
Play = Callable[[str, str, str, int], str]


class TournamentError(ValueError):
    """A tournament that cannot be scheduled (bad format, field or matchups)."""


class Unplayed(Exception):
    """Raised by ``play`` for a game that is not (yet) played: a cancel came, or a
    replay of stored games reached one never stored. ``run_task`` stops the task there
    and returns what was played, with the task ``unfinished``."""


@dataclass
class Game:
    number: int
    kind: str  # "regulation" or "tie_break"
    outcome: str  # one of OUTCOMES

    def as_dict(self) -> dict:
        return {"game": self.number, "kind": self.kind, "outcome": self.outcome}


@dataclass
class Series:
    a: str
    b: str
    round: int
    games: list[Game] = field(default_factory=list)
    status: str = "pending"  # "won", "drawn", "failed", or "pending" (never played)
    winner: str | None = None  # by judged games only
    advanced: str | None = None  # elimination: who goes on (the winner, or the fallback's)
    seeded_fallback: bool = False

    def wins(self, side: str) -> int:
        return sum(1 for g in self.games if g.kind == "regulation" and g.outcome == side)

    def as_dict(self) -> dict:
        return {
            "round": self.round,
            "a": self.a,
            "b": self.b,
            "status": self.status,
            "winner": self.winner,
            "advanced": self.advanced,
            "seeded_fallback": self.seeded_fallback,
            "wins_a": self.wins("A"),
            "wins_b": self.wins("B"),
            "draws": sum(1 for g in self.games if g.kind == "regulation" and g.outcome == "tie"),
            "games": [g.as_dict() for g in self.games],
        }


@dataclass
class TaskTournament:
    task_id: str
    series: list[Series] = field(default_factory=list)
    # "complete"; "incomplete" (round robin: a series failed, the others played);
    # "stopped" (elimination: a failed game ended the bracket); "unfinished" (``play``
    # raised ``Unplayed``: the series it was in stays "pending", none after it is listed)
    status: str = "complete"
    champion: str | None = None
    epoch: int | None = None  # which epoch's replies it compared; None: the one epoch

    @property
    def games_played(self) -> int:
        return sum(len(s.games) for s in self.series)

    def as_dict(self) -> dict:
        return {
            "task_id": self.task_id,
            **({} if self.epoch is None else {"epoch": self.epoch}),
            "status": self.status,
            "champion": self.champion,
            "series": [s.as_dict() for s in self.series],
        }


def check(
    candidates: Sequence[str],
    *,
    format: str,
    best_of: int,
    opening: Sequence[tuple[str, str]] | None = None,
) -> None:
    """Raises ``TournamentError`` naming what is wrong with the schedule's inputs."""
    if format not in FORMATS:
        raise TournamentError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if isinstance(best_of, bool) or not isinstance(best_of, int) or best_of < 1 or not best_of % 2:
        raise TournamentError(f"best-of must be an odd positive integer, got {best_of!r}")
    if len(candidates) < 2:
        raise TournamentError("a tournament needs at least two candidates")
    if len(set(candidates)) != len(candidates):
        raise TournamentError("candidates must be distinct")
    n = len(candidates)
    if format == SINGLE_ELIMINATION and n & (n - 1):
        raise TournamentError(
            f"single elimination needs a power-of-two field (2, 4, 8, ...), got {n} candidates"
        )
    if opening is not None:
        if format != SINGLE_ELIMINATION:
            raise TournamentError("opening matchups are for single elimination only")
        seen = [c for pair in opening for c in pair]
        if len(opening) != n // 2 or any(len(pair) != 2 for pair in opening):
            raise TournamentError(f"opening matchups must be {n // 2} pairs of candidates")
        if sorted(seen) != sorted(candidates):
            raise TournamentError("opening matchups must use every candidate exactly once")


def seeded_fallback(seed: int, a: str, b: str) -> str:
    """Who advances after three drawn tie-breaks: a function of the seed and the pair
    only (either order of the pair gives the same answer)."""
    first, second = sorted((a, b))
    digest = hashlib.sha256(f"{seed}\x00{first}\x00{second}".encode()).digest()
    return first if digest[0] % 2 == 0 else second


def play_series(
    task_id: str,
    series: Series,
    *,
    best_of: int,
    tie_breaks: bool,
    seed: int,
    play: Play,
) -> None:
    """Plays ``series`` to its end (in place). A failed game ends it as ``failed``."""

    def game(kind: str) -> str:
        number = len(series.games) + 1
        outcome = play(task_id, series.a, series.b, number)
        if outcome not in OUTCOMES:
            raise ValueError(f"play returned {outcome!r}, not one of {OUTCOMES}")
        series.games.append(Game(number, kind, outcome))
        return outcome

    need = best_of // 2 + 1
    for number in range(1, best_of + 1):
        outcome = game("regulation")
        if outcome == "failed":
            series.status = "failed"
            return
        wins_a, wins_b = series.wins("A"), series.wins("B")
        left = best_of - number
        if wins_a >= need or wins_b >= need:
            series.status = "won"
            series.winner = series.advanced = series.a if wins_a >= need else series.b
            return
        if wins_a + left < need and wins_b + left < need:
            break  # neither side can still win
    series.status = "drawn"
    if not tie_breaks:
        return
    for _ in range(TIE_BREAKS):
        outcome = game("tie_break")
        if outcome == "failed":
            series.status = "failed"
            return
        if outcome in ("A", "B"):
            series.advanced = series.a if outcome == "A" else series.b
            return  # advanced by a judged tie-break; the series itself stays drawn
    series.advanced = seeded_fallback(seed, series.a, series.b)
    series.seeded_fallback = True


def run_task(
    task_id: str,
    candidates: Sequence[str],
    *,
    format: str,
    best_of: int = 1,
    seed: int = 0,
    play: Play,
    opening: Sequence[tuple[str, str]] | None = None,
    epoch: int | None = None,
) -> TaskTournament:
    """One task's tournament (of one ``epoch``'s replies, with epochs), played through
    ``play`` in schedule order (a stored task replays identically: the schedule depends
    only on the outcomes)."""
    check(candidates, format=format, best_of=best_of, opening=opening)
    result = TaskTournament(task_id, epoch=epoch)
    try:
        _schedule(result, candidates, format=format, best_of=best_of, seed=seed, play=play,
                  opening=opening)  # fmt: skip
    except Unplayed:
        result.status = "unfinished"
    return result


def _schedule(
    result: TaskTournament,
    candidates: Sequence[str],
    *,
    format: str,
    best_of: int,
    seed: int,
    play: Play,
    opening: Sequence[tuple[str, str]] | None,
) -> None:
    task_id = result.task_id
    elimination = format != ROUND_ROBIN

    def one(a: str, b: str, round_: int) -> Series:
        series = Series(a, b, round_)
        result.series.append(series)
        play_series(task_id, series, best_of=best_of, tie_breaks=elimination, seed=seed, play=play)
        if series.status == "failed" and elimination:
            result.status = "stopped"
        return series

    if format == ROUND_ROBIN:
        for i, a in enumerate(candidates):
            for b in candidates[i + 1 :]:
                if one(a, b, 1).status == "failed":
                    result.status = "incomplete"  # the other series still play
        return
    if format == KING_OF_THE_HILL:
        holder = candidates[0]
        for round_, challenger in enumerate(candidates[1:], start=1):
            series = one(holder, challenger, round_)
            if result.status == "stopped":
                return
            holder = series.advanced or holder
        result.champion = holder
        return
    field_ = [c for pair in opening for c in pair] if opening else list(candidates)
    round_ = 1
    while len(field_) > 1:
        winners = []
        for a, b in zip(field_[::2], field_[1::2], strict=True):
            series = one(a, b, round_)
            if result.status == "stopped":
                return
            winners.append(series.advanced)
        field_, round_ = winners, round_ + 1
    result.champion = field_[0]


def scheduled_series(n: int, format: str) -> int:
    """Series a task schedules for ``n`` candidates (the progress bar's estimate is this
    × tasks × best-of; the games actually played differ, 003 "Coverage")."""
    return n * (n - 1) // 2 if format == ROUND_ROBIN else n - 1
