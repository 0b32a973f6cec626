"""RQ jobs of offline evaluations: primitive ids in, one service call."""

from evals.services import evaluation_execute


def evaluation_run(evaluation_id: int) -> None:
    """Enqueued on the ``evals`` queue when an evaluation is created (and again to
    resume one): runs what it is missing. Idempotent: a second job finds nothing left."""
    evaluation_execute(evaluation_id=evaluation_id)
