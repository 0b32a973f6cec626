"""An environment is validated by two replays in fresh sandboxes (docs/environments.md,
"Validation"): the failing trajectory must fail the grader and the reference must pass
it. Then ``conversion_s`` is the time from the failure being known to validated."""

import logging

from django.db.models import F
from django.utils import timezone

from environments.models import Environment
from environments.replay import replay

logger = logging.getLogger(__name__)

# A validation whose replay cannot run (its sandbox, storage: the arena's side) is tried
# this many times in all; then the environment is invalid with the last error (a
# trajectory that breaks every sandbox it runs in must not loop for ever).
VALIDATION_ATTEMPTS = 3


def _record(result, role: str, expected: bool) -> dict:
    return {**result.as_dict(), "role": role, "expected_pass": expected}


class ReplayUnavailable(Exception):
    """A replay could not run through the arena's fault (its sandbox, its storage): the
    job is retried and the environment stays graded."""


def environment_validate(*, environment_id: int) -> str:
    """Replays a graded environment's two trajectories, each in a fresh sandbox;
    returns its new status: ``validated``, or ``invalid`` with the reason (a replay
    contradicted the grader, or the environment itself cannot be replayed). Raises
    ``ReplayUnavailable``, changing nothing but the attempts counted, when a replay
    could not run for the arena's own reasons, before its last attempt."""
    graded = Environment.objects.filter(pk=environment_id, status=Environment.Status.GRADED)
    if not graded.update(validation_attempts=F("validation_attempts") + 1):
        return Environment.objects.get(pk=environment_id).status
    env = Environment.objects.get(pk=environment_id)
    runs, broken = [], []
    for role, actions, expected, run_id in (
        ("failing", env.failing_actions, False, env.run_id),
        ("reference", env.reference_actions, True, env.reference_run_id),
    ):
        # The lease names a real run: a desktop replay reaches the simulated web as
        # that run's lane did. The two replays run one after the other.
        result = replay(
            state=env.state, actions=actions, grader=env.grader, label=f"{env.pk}-{role}",
            run_id=run_id,
        )  # fmt: skip
        if result.error and result.retryable:
            if env.validation_attempts < VALIDATION_ATTEMPTS:
                raise ReplayUnavailable(f"the {role} replay of {env}: {result.error}")
            broken.append(
                f"the {role} replay could not run in {VALIDATION_ATTEMPTS} attempts: {result.error}"
            )
            runs.append(_record(result, role, expected))
            break
        if result.error:
            broken.append(f"the {role} replay cannot run: {result.error}")
        runs.append(_record(result, role, expected))
    wrong = [
        "the failing trajectory passed the grader" if r["role"] == "failing"
        else "the reference failed the grader"
        for r in runs
        if not r["error"] and r["passed"] != r["expected_pass"]
    ]  # fmt: skip
    now = timezone.now()
    if broken or wrong:
        fields = {"status": Environment.Status.INVALID, "status_detail": "; ".join(broken + wrong)}
    else:
        fields = {
            "status": Environment.Status.VALIDATED,
            "status_detail": "",
            "validated_at": now,
            "conversion_s": (now - env.failed_at).total_seconds(),
        }
    Environment.objects.filter(pk=env.pk, status=Environment.Status.GRADED).update(
        replays=runs, **fields
    )
    return fields["status"]
