"""An environment is validated by two replays in fresh sandboxes (docs/environments.md,
"Validation"): the failing trajectory must fail the grader, the reference must pass it,
and a desktop reference's wrong copies (``environments.mutation``: its answer taken out
of its message, its files made wrong) must each fail it. Then ``conversion_s`` is the
time from the failure being known to validated."""

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
    record = {**result.as_dict(), "role": role, "expected_pass": expected}
    record.pop("mutations")
    return record


def _mutated(result) -> list[dict]:
    """The reference's wrong copies as replays of their own (role ``mutated``)."""
    return [
        {**m, "role": "mutated", "expected_pass": False, "label": f"{result.label}-{m['mutation']}",
         "steps_replayed": result.steps_replayed, "duration_ms": 0}
        for m in result.mutations
    ]  # fmt: skip


def _unmutated(env: Environment, runs: list[dict]) -> list[str]:
    """Why the reference's mutations show nothing: a desktop reference that passed but
    had nothing to mutate (no file, no answer in its message), or whose mutation could
    not run. A repo environment's grader is its task's own tests: not mutated."""
    reference = next((r for r in runs if r["role"] == "reference"), None)
    if env.state.get("kind") != "desktop" or reference is None or not reference["passed"]:
        return []
    mutated = [r for r in runs if r["role"] == "mutated"]
    broken = [f"the {r['mutation']} mutation could not run: {r['error']}" for r in mutated
              if r["error"] and r["grader"] is None]  # fmt: skip
    if not mutated:
        return [
            "the reference left nothing to mutate (no file, no answer in its message): "
            "the grader cannot be shown to refuse a wrong result"
        ]
    return broken


def _contradiction(run: dict) -> str:
    if run["role"] == "failing":
        return "the failing trajectory passed the grader"
    if run["role"] == "reference":
        return "the reference failed the grader"
    return (
        f"the grader accepted the reference with its {run['mutation']} made wrong: it does "
        "not check what the instruction asks"
    )


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
            run_id=run_id, mutate=role == "reference",
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
        runs += _mutated(result)
    wrong = [
        _contradiction(r) for r in runs if not r["error"] and r["passed"] != r["expected_pass"]
    ] + _unmutated(env, runs)
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
