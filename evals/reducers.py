"""Epochs (issue 40): each task runs k times, and a reducer makes one score per task of
its epochs' scores; an agent's figure is then the mean over tasks of those reduced
scores, and its standard error treats the task as the unit (k epochs of a task are
not k independent samples). Pure.

Reducers: ``mean``, ``max``, ``mode`` (the most frequent value; a tie goes to the
smallest of the tied values), ``pass_at_k:K`` (the unbiased pass@K estimate from the n
scored epochs, c of them scoring 1: ``coding.metrics.pass_at_k``) and ``at_least_k:K``
(1 iff at least K epochs scored 1).
"""

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coding.metrics import pass_at_k

MAX_EPOCHS = 20
NAMES = ("mean", "max", "mode", "pass_at_k", "at_least_k")
_WITH_K = ("pass_at_k", "at_least_k")


class ReducerError(ValueError):
    """A reducer that cannot be used, and why."""


@dataclass(frozen=True)
class Reducer:
    name: str
    k: int | None = None

    def __str__(self) -> str:
        return f"{self.name}:{self.k}" if self.k is not None else self.name

    def as_json(self) -> dict:
        return {"name": self.name, "k": self.k}


def check_epochs(epochs) -> int:
    if isinstance(epochs, bool) or not isinstance(epochs, int) or not 1 <= epochs <= MAX_EPOCHS:
        raise ReducerError(f"epochs must be a whole number in 1..{MAX_EPOCHS}, got {epochs!r}")
    return epochs


def parse_reducer(text: str, *, epochs: int) -> Reducer:
    """``mean``, ``max``, ``mode``, ``pass_at_k:K`` or ``at_least_k:K`` (1 ≤ K ≤ epochs)."""
    check_epochs(epochs)
    if not isinstance(text, str):
        raise ReducerError(f"the reducer must be a string, got {text!r}")
    name, colon, k_text = text.strip().partition(":")
    if name not in NAMES:
        raise ReducerError(f"unknown reducer {text!r} (the reducers: mean, max, mode, "
                           "pass_at_k:K, at_least_k:K)")  # fmt: skip
    if name not in _WITH_K:
        if colon:
            raise ReducerError(f"the {name} reducer takes no K, got {text!r}")
        return Reducer(name)
    if not k_text.strip().isdigit():
        raise ReducerError(f"{name} needs a whole K: '{name}:K' with 1 ≤ K ≤ epochs, got {text!r}")
    k = int(k_text)
    if not 1 <= k <= epochs:
        raise ReducerError(f"{name}'s K must lie in 1..{epochs} (the epochs), got {k}")
    return Reducer(name, k)


def reduce(reducer: Reducer, values: Sequence[float]) -> float | None:
    """One task's score from its scored epochs' values (each in [0, 1]); None when there
    is none, or for pass@K over fewer than K scored epochs."""
    if not values:
        return None
    if reducer.name == "mean":
        return sum(values) / len(values)
    if reducer.name == "max":
        return max(values)
    if reducer.name == "mode":
        counts = Counter(values)
        top = max(counts.values())
        return min(v for v, n in counts.items() if n == top)
    correct = sum(1 for v in values if v == 1.0)
    if reducer.name == "at_least_k":
        return float(correct >= reducer.k)
    if len(values) < reducer.k:
        return None
    return pass_at_k(len(values), correct, reducer.k)


def mean_and_stderr(values: Sequence[float]) -> tuple[float | None, float | None]:
    """The mean and its standard error (sample standard deviation / √n); the error is
    None for fewer than 2 values, both None for none."""
    n = len(values)
    if n == 0:
        return None, None
    mean = sum(values) / n
    if n < 2:
        return mean, None
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(variance / n)


def metric(reducer: Reducer, per_task: Mapping[str, Sequence[float]]) -> dict:
    """An agent's figure on one scorer: ``per_task`` maps each task to its scored
    epochs' values. Each task's values are reduced to one; the mean is over tasks, and
    the standard error over tasks too (the task is the cluster: identical epochs give
    the error of one epoch). ``unscored_tasks`` counts tasks with no reduced value."""
    reduced = {task: reduce(reducer, values) for task, values in per_task.items()}
    kept = [v for v in reduced.values() if v is not None]
    mean, stderr = mean_and_stderr(kept)
    return {
        "mean": mean,
        "stderr": stderr,
        "tasks": len(kept),
        "unscored_tasks": len(reduced) - len(kept),
        "epochs_scored": sum(len(v) for v in per_task.values()),
    }


def epochs_of(settings: Mapping) -> int:
    """An evaluation's epochs from its settings (before issue 40 only repo tasks
    repeated, as ``repo.replicates``)."""
    return settings.get("epochs") or (settings.get("repo") or {}).get("replicates") or 1


def reducer_of(settings: Mapping) -> Reducer:
    chosen = settings.get("reducer") or {"name": "mean", "k": None}
    return Reducer(chosen["name"], chosen.get("k"))
