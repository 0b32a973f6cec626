"""Writes of offline evaluations (docs/evaluations.md): storing suites and rubrics
(``files``), creating, starting and cancelling an evaluation (``creation``), and running
it, resumably (``execution``)."""

from evals.services.creation import (
    evaluation_cancel,
    evaluation_create,
    evaluation_enqueue,
    random_selection,
)
from evals.services.execution import evaluation_execute
from evals.services.files import rubric_store, suite_store

__all__ = [
    "evaluation_cancel",
    "evaluation_create",
    "evaluation_enqueue",
    "evaluation_execute",
    "random_selection",
    "rubric_store",
    "suite_store",
]
