"""Training environments made from failed runs (docs/environments.md)."""

from django.conf import settings
from django.db import models
from django.db.models import Q

# Where an environment's own (redacted) files live in the private storage, by SHA-256.
BLOB_PREFIX = "environments/blobs/"


class Environment(models.Model):
    """A failed run turned into a task a model can be trained on: the run's initial
    state with personal data redacted (``state``, a snapshot manifest whose files are
    the redacted copies), a grader derived from the failure (``grader``: data, a check
    list and an optional command), and two replays that validate it."""

    class FailureMode(models.TextChoices):
        GAVE_UP = "gave_up", "the agent gave up"
        BUDGET = "budget", "the agent exhausted its step or time budget"
        TESTS_FAILED = "tests_failed", "the task's success command failed on the agent's result"
        MACHINE_WRONG = "machine_wrong", "a machine judge found the result wrong"
        JUDGED_WORSE = "judged_worse", "judged worse than an opponent judged correct"

    class Status(models.TextChoices):
        CANDIDATE = "candidate", "picked, not built yet"
        HELD = "held", "held: no consent, or a file that cannot be redacted"
        NEEDS_GRADER = "needs_grader", "no grader could be derived: an operator must write one"
        GRADED = "graded", "graded, waiting for its replays"
        VALIDATED = "validated", "validated by both replays"
        INVALID = "invalid", "a replay contradicted the grader"
        REJECTED = "rejected", "rejected by an admin"

    run = models.OneToOneField("battles.Run", on_delete=models.PROTECT, related_name="environment")
    battle = models.ForeignKey("battles.Battle", on_delete=models.PROTECT, related_name="+")
    # The opponent's run judged correct, whose final state the grader is derived from
    # and whose replay must pass it.
    reference_run = models.ForeignKey(
        "battles.Run", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    failure_mode = models.CharField(max_length=20, choices=FailureMode.choices)
    status = models.CharField(
        max_length=20, choices=Status.choices, default=Status.CANDIDATE, db_index=True
    )
    status_detail = models.TextField(blank=True)
    # The source run's snapshot digest (the snapshot itself may expire; the environment
    # keeps only its redacted state).
    snapshot_digest = models.CharField(max_length=64)
    state = models.JSONField(null=True, blank=True, help_text="The redacted initial state.")
    state_digest = models.CharField(max_length=64, blank=True)
    # What redaction replaced: [{"where", "entity_type", "placeholder"}], never the value.
    redactions = models.JSONField(default=list, blank=True)
    grader = models.JSONField(null=True, blank=True)
    # The two trajectories replayed: [{"tool", "args"}] each, redacted like the state.
    failing_actions = models.JSONField(default=list, blank=True)
    reference_actions = models.JSONField(default=list, blank=True)
    replays = models.JSONField(default=list, blank=True)
    # Validations started: a replay that cannot run (the arena's fault) is tried again,
    # at most VALIDATION_ATTEMPTS times in all (environments.validation).
    validation_attempts = models.PositiveSmallIntegerField(default=0)
    failed_at = models.DateTimeField(help_text="When the source run ended.")
    run_duration_s = models.FloatField(help_text="The source run's duration.")
    created_at = models.DateTimeField(auto_now_add=True)
    validated_at = models.DateTimeField(null=True, blank=True)
    # failed_at → validated_at, and its target: 2 × the run's duration + 5 min.
    conversion_s = models.FloatField(null=True, blank=True)
    rejected_reason = models.TextField(blank=True)
    rejected_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    rejected_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-pk"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(status="rejected") | ~Q(rejected_reason=""),
                name="environment_rejected_says_why",
            ),
        ]

    def __str__(self) -> str:
        return f"Environment {self.pk} ({self.get_failure_mode_display()})"

    @property
    def conversion_target_s(self) -> float:
        return 2 * self.run_duration_s + 300


class BattleScan(models.Model):
    """How far the candidate picker has looked at a battle (environments.picking):
    ``ended`` once its lanes' failures were considered, ``decided`` once its decision
    was too; a battle is never looked at again at the same stage."""

    class Stage(models.TextChoices):
        ENDED = "ended"
        DECIDED = "decided"

    battle = models.OneToOneField(
        "battles.Battle", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    stage = models.CharField(max_length=10, choices=Stage.choices)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"Battle {self.battle_id} looked at ({self.stage})"
