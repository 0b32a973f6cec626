"""The rows of coding battles (docs/coding.md): a repo task's source and commands, each
run's diff with what the judge sandbox measured of it, and the battle's live phases.

Every byte that came out of a sandbox (the diff, command output, the commit and tree
ids the sandbox printed) is untrusted and stored bounded and escaped
(``sandboxes.untrusted``); the host never runs git on it."""

from django.db import models
from django.db.models import Q


class RepoSource(models.Model):
    """What a repo task runs on. The source is a git URL the egress policy allows, or
    an uploaded git bundle or tarball; either way the worker turns it once, inside a
    sandbox, into a canonical bundle (one commit holding the ref's tree) that both lanes
    clone: byte-identical copies, and the parity digest covers the bundle and its tree.
    With ``judge_ref`` the judge's copy is a second commit on top (hidden tests), in a
    bundle of its own that no agent sandbox ever receives."""

    class Origin(models.TextChoices):
        URL = "url", "a git URL"
        BUNDLE = "bundle", "an uploaded git bundle"
        TARBALL = "tarball", "an uploaded tarball"

    task = models.OneToOneField("battles.Task", on_delete=models.CASCADE, related_name="repo")
    origin = models.CharField(max_length=10, choices=Origin.choices)
    url = models.CharField(max_length=2000, blank=True)
    ref = models.CharField(max_length=200, default="HEAD")
    judge_ref = models.CharField(max_length=200, blank=True)
    # The upload as received (PRIVATE_MEDIA_ROOT-relative, content-addressed).
    upload_path = models.CharField(max_length=300, blank=True)
    upload_sha256 = models.CharField(max_length=64, blank=True)
    success_cmd = models.TextField()
    test_cmd = models.TextField(blank=True)
    time_limit_s = models.PositiveIntegerField(default=600)
    # Filled by the worker's clone phase (battles.services.repo_source).
    bundle_path = models.CharField(max_length=300, blank=True)
    bundle_sha256 = models.CharField(max_length=64, blank=True)
    judge_bundle_path = models.CharField(max_length=300, blank=True)
    judge_bundle_sha256 = models.CharField(max_length=64, blank=True)
    commit = models.CharField(max_length=64, blank=True)
    tree = models.CharField(max_length=64, blank=True)
    judge_commit = models.CharField(max_length=64, blank=True)
    files = models.PositiveIntegerField(default=0)
    prepared_at = models.DateTimeField(null=True, blank=True)
    prepare_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(time_limit_s__gte=10, time_limit_s__lte=3600),
                name="repo_time_limit_range",
            ),
            models.CheckConstraint(
                condition=(Q(origin="url") & ~Q(url=""))
                | (Q(origin__in=["bundle", "tarball"]) & ~Q(upload_path="")),
                name="repo_source_given",
            ),
        ]

    def __str__(self) -> str:
        return f"repo of task {self.task_id} ({self.origin})"


class CodingOutcome(models.Model):
    """One run's diff against the checkpoint and the judge sandbox's measurements of it.
    Scores are None where a check did not measure (no test command, a crash): shown as
    such, and counted 0 by the composite."""

    class Applied(models.TextChoices):
        EMPTY = "empty", "no change to apply"
        APPLY = "apply", "git apply"
        THREE_WAY = "3way", "git apply --3way"
        REJECT = "reject", "git apply --reject"
        FUZZ = "fuzz", "patch -p1 --fuzz"
        NONE = "none", "the patch did not apply"
        REFUSED = "refused", "the patch was refused"

    run = models.OneToOneField("battles.Run", on_delete=models.CASCADE, related_name="coding")
    diff = models.TextField(blank=True)
    diff_sha256 = models.CharField(max_length=64, blank=True)
    diff_bytes = models.PositiveIntegerField(default=0)
    # [{"path", "added", "removed", "binary"}] as the judge sandbox counted them.
    files = models.JSONField(default=list, blank=True)
    diff_error = models.TextField(blank=True)
    applied = models.CharField(max_length=10, choices=Applied.choices, blank=True)
    # Each attempt of the fallback chain: [{"step", "exit_code"}].
    apply_attempts = models.JSONField(default=list, blank=True)
    # Each check's record: {"success": {...}, "tests": {...}, "lint": {...}, ...} with
    # exit code, seconds, timed out, the output's tail.
    checks = models.JSONField(default=dict, blank=True)
    functional = models.FloatField(null=True, blank=True)
    regression = models.FloatField(null=True, blank=True)
    lint = models.FloatField(null=True, blank=True)
    complexity = models.FloatField(null=True, blank=True)
    cost_efficiency = models.FloatField(null=True, blank=True)
    composite = models.FloatField(null=True, blank=True)
    directness = models.JSONField(default=dict, blank=True)
    # {"input_tokens", "output_tokens", "cache_creation_tokens", "cache_read_tokens",
    #  "cost_usd", "source"}: the CLI's own report, else the gateway's spans, else prices.
    usage = models.JSONField(default=dict, blank=True)
    agent_destroyed_at = models.DateTimeField(null=True, blank=True)
    judge_created_at = models.DateTimeField(null=True, blank=True)
    judged_at = models.DateTimeField(null=True, blank=True)
    judge_error = models.TextField(blank=True)
    # Why the judge refused the patch (not the arena's diff format, a link, a change it
    # does not name; coding.patchcheck), "" when it did not.
    refused = models.TextField(blank=True)
    # Why the judge found the run's test results forged (coding.grading), "" when it did
    # not: never a pass, and the battle is excluded at screening (forged_grade).
    forged = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"coding outcome of run {self.run_id}"


class CodingPhase(models.Model):
    """One phase of a coding battle as the live page and the SSE stream show it:
    clone, each side's agent, diff and destroy, the judge sandbox and each check."""

    class Status(models.TextChoices):
        RUNNING = "running"
        OK = "ok"
        FAILED = "failed"
        SKIPPED = "skipped"

    battle = models.ForeignKey(
        "battles.Battle", null=True, blank=True, on_delete=models.CASCADE, related_name="phases"
    )
    run = models.ForeignKey(
        "battles.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="phases"
    )
    name = models.CharField(max_length=40)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    detail = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["started_at", "pk"]
        indexes = [models.Index(fields=["battle", "id"], name="coding_phase_battle")]

    def __str__(self) -> str:
        return f"{self.name} {self.status}"
