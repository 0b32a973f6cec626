"""Tasks, battles, runs (one per side) and the steps each run took."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q


class Task(models.Model):
    class Kind(models.TextChoices):
        DESKTOP = "desktop", "a desktop task (display, browser, shell)"
        REPO = "repo", "a coding task on a git repository, graded by tests"

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="tasks")
    submitter = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="tasks"
    )
    instruction = models.TextField()
    start_url = models.URLField(max_length=2000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # The near-duplicate check's MinHash signature of the instruction's word trigrams
    # (battles.similarity.signature), written at admission so that a freshly started
    # process reads it instead of recomputing it. Null for tasks created another way
    # (imports, tournaments) or before it existed: the check then reads the instruction.
    minhash = models.BinaryField(
        null=True,
        editable=False,
        help_text="MinHash signature of the instruction (48 little-endian uint32).",
    )
    # The task's category (battles.classify: browsing, files and data, ...): each category
    # has a board of its own. Empty for tasks classified before categories existed.
    category = models.CharField(max_length=20, blank=True, db_index=True)
    # A repo task's source, commands and limits are its ``repo`` (battles.coding_models).
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.DESKTOP)

    class Meta:
        indexes = [models.Index(fields=["submitter", "-created_at"], name="task_submitter_recent")]

    def __str__(self) -> str:
        return f"Task {self.pk}"


class Attachment(models.Model):
    """A file submitted with a task. The bytes live in the private storage (never a
    web root; arena_site/media.py), content-addressed per task; both lanes receive
    exactly these bytes."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="attachments")
    # The task's team, kept on the row: every tenant-owned row carries its team.
    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="attachments")
    name = models.CharField(max_length=120, help_text="Sanitised file name (no path parts).")
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    content_type = models.CharField(
        max_length=100, help_text="Derived from the allowed extension, not from the client."
    )
    # Its name in the private storage: attachments/<task id>/<sha256>.
    path = models.CharField(max_length=300)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "name"], name="attachment_unique_task_name")
        ]
        ordering = ["task", "pk"]

    def __str__(self) -> str:
        return f"{self.name} ({self.size} B) of task {self.task_id}"


class BattleQuerySet(models.QuerySet):
    def for_teams(self, team_ids: list[int]) -> "BattleQuerySet":
        return self.filter(team_id__in=team_ids)


class Battle(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        # Both lanes ended; the identity-leak scan runs before any judge sees it.
        SCREENING = "screening"
        JUDGING = "judging"
        DECIDED = "decided"
        EXCLUDED = "excluded"
        FAILED = "failed"

    class Outcome(models.TextChoices):
        A = "A"
        B = "B"
        TIE = "tie"
        BOTH_BAD = "both_bad"

    class DecisionSource(models.TextChoices):
        """Who decided the battle, through ``judging.services.battle_decide``."""

        CROWD = "crowd", "independent judges"
        SUBMITTER = "submitter", "the submitting team's own votes only (self-judged)"
        IMPORT = "import", "imported historical judgment"

    class ExclusionReason(models.TextChoices):
        """SPEC §5.3, in the order the rules apply."""

        NAMED_MODEL = "named_model", "judge-visible text named a model"
        NO_RUN = "no_run", "one side has no run record"
        ARENA_FAULT = "arena_fault", "one side could not run through the arena's fault"
        FORGED_GRADE = "forged_grade", "one side's code forged its test results"
        ENDED_BY_SUBMITTER = "ended_by_submitter", "the submitter ended one side early"
        BUDGET_MISMATCH = "budget_mismatch", "the sides ran under different step budgets"
        NO_ADMISSIBLE_VOTE = "no_admissible_vote", "no admissible vote remains"
        # Retired: until M3 a side with no step and no delivery voided its battle; now
        # doing nothing is an outcome judges weigh (docs/method.md §7). Kept for the
        # battles it excluded then.
        NO_TRAJECTORY = "no_trajectory", "one side produced no trajectory (retired rule)"

    # Reasons no rule gives any more (their battles keep them).
    RETIRED_EXCLUSIONS = ("no_trajectory",)

    arena = models.ForeignKey("agents.Arena", on_delete=models.PROTECT, related_name="battles")
    # The task's team, kept on the battle too: tenant filters and the per-team queue
    # quota then need no join.
    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="battles")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="battles")
    agent_a = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="+")
    agent_b = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    redundancy_target = models.PositiveSmallIntegerField(default=1)
    is_calibration = models.BooleanField(default=False)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, blank=True)
    evidence_weight = models.FloatField(null=True, blank=True)
    exclusion_reason = models.CharField(max_length=40, blank=True, choices=ExclusionReason.choices)
    # Who decided it; "submitter" (SPEC §5.4: the submitting team's own blind votes
    # alone, no independent judge had an admissible one) is the published
    # self-judged-only tally.
    decision_source = models.CharField(max_length=10, choices=DecisionSource.choices, blank=True)
    # When the decision was made and published: from then on no vote on it can count.
    decided_at = models.DateTimeField(null=True, blank=True)
    # The judge of the earliest vote that produced the outcome: the battle's cluster in
    # the cluster-robust interval of SPEC §7.3 (the votes themselves are flagged counted).
    cluster_judge = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # What the streaming update of this battle's decision changed, so that a retraction
    # or an exclusion can take exactly that back: {"a": ΔR_A, "b": ΔR_B, "y": y}.
    streaming_applied = models.JSONField(null=True, blank=True)
    failure_reason = models.TextField(blank=True)
    # Event times of SPEC §6: s, q, q + δ, e, h (r and ℓ are per refit run:
    # ratings.models.Incorporation).
    submitted_at = models.DateTimeField()
    dequeued_at = models.DateTimeField(null=True, blank=True)
    lanes_started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    first_judgment_at = models.DateTimeField(null=True, blank=True)
    # Touched by the lanes on every step; the janitor fails a running battle whose
    # heartbeat stopped (its worker died).
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Which try this is: a battle whose worker died is re-run once on fresh sandboxes
    # (``battles_recover_dead_workers``); a second death fails it with the reason.
    attempt = models.PositiveSmallIntegerField(default=1)
    # The process driving it (set when claimed): the janitor of that host sees at once
    # that it died, without waiting for the heartbeat to go stale.
    worker_host = models.CharField(max_length=255, blank=True)
    worker_pid = models.PositiveIntegerField(null=True, blank=True)
    worker_token = models.CharField(max_length=64, blank=True, default="")  # process_token
    # Live admissible votes on the battle, kept by judging.services.tallies (recounted
    # in every transaction that casts, takes back or re-judges a vote, the battle row
    # locked): the judge's next battle is then one index walk, not a count per battle.
    admissible_votes = models.PositiveIntegerField(default=0)
    # While judging: the earliest moment its resolution can change anything (a live
    # vote's undo window ends, or JUDGING_TTL runs out). Written in statements the vote
    # path already runs (the tally), read by the decider (judging.decider): due battles
    # are one index walk. Early is harmless (the decider finds nothing to do and moves
    # it on); it is never left later than a live vote's final_at.
    decide_due_at = models.DateTimeField(null=True, blank=True)
    # The battle this one replaces: that battle failed because an agent failed, and its
    # task runs again with a fresh pair (battles.services.failures). At most one re-run
    # per task (the constraint below), so a failing task never loops.
    rerun_of = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="rerun"
    )

    objects = BattleQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=~Q(agent_a=F("agent_b")), name="battle_distinct_agents"
            ),
            models.CheckConstraint(
                condition=Q(redundancy_target__gte=1), name="battle_redundancy_positive"
            ),
            models.UniqueConstraint(
                fields=["task"],
                condition=Q(rerun_of__isnull=False),
                name="battle_one_rerun_per_task",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "submitted_at"], name="battle_status_fifo"),
            # The admission bound counts queued battles per arena and team on every
            # submission: a small partial index keeps that count cheap.
            models.Index(
                fields=["arena", "team"], name="battle_queued", condition=Q(status="queued")
            ),
            # The judge's next battle (judging.services.serving.judge_next): open
            # battles in serving order, fewest admissible votes, oldest first.
            models.Index(
                fields=["admissible_votes", "ended_at", "id"],
                name="battle_judging_queue",
                condition=Q(status="judging"),
            ),
            # The decider's due battles (judging.decider): oldest due first.
            models.Index(
                fields=["decide_due_at", "id"],
                name="battle_decide_due",
                condition=Q(status="judging"),
            ),
            # The board's counts (ratings.selectors): rated battles decided since the
            # last refit read them (the rest no refit includes yet: an anti-join on
            # ratings.IncorporatedBattle), the self-judged tally and the exclusion
            # counts, each over its own slice instead of every battle of the arena.
            models.Index(
                fields=["arena", "decided_at"],
                name="battle_rated_recent",
                condition=Q(status="decided", exclusion_reason="") & ~Q(outcome=""),
            ),
            models.Index(
                fields=["arena"],
                name="battle_self_judged",
                condition=Q(status="decided", decision_source="submitter"),
            ),
            models.Index(
                fields=["arena", "exclusion_reason"],
                name="battle_excluded",
                condition=Q(status="excluded"),
            ),
        ]

    def __str__(self) -> str:
        return f"Battle {self.pk}"

    def agent_for(self, side: str):
        return self.agent_a if side == "A" else self.agent_b


class TestDrive(models.Model):
    """One agent alone on a sample task in a sandbox, for its team and the admins to
    see how it behaves before (or between) battles. Its one lane is a ``Run`` like a
    battle's (steps, screenshots, spans), never judged, rated or counted."""

    __test__ = False  # not a pytest test class, whatever its name says

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        ENDED = "ended"
        FAILED = "failed"

    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="test_drives")
    # The agent's entrant team when the drive was asked for (None for the arena's own
    # agents, which only admins see): the drive's trajectory is that team's to see.
    team = models.ForeignKey(
        "accounts.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+"
    )
    sample = models.CharField(max_length=40, help_text="The sample task's name.")
    instruction = models.TextField()
    start_url = models.URLField(max_length=2000, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    failure_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            # One drive at a time per agent: a team cannot queue sandboxes without bound.
            models.UniqueConstraint(
                fields=["agent"],
                condition=Q(status__in=["queued", "running"]),
                name="test_drive_one_live_per_agent",
            )
        ]

    def __str__(self) -> str:
        return f"Test drive {self.pk} of {self.agent}"


class Run(models.Model):
    """One side's lane of a battle, the one lane of a test drive, or one lane of an
    offline evaluation (``for_evaluation``: the evaluation's ``EvalRun`` points at it;
    the battles app does not know evaluations)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        ENDED = "ended"

    class EndReason(models.TextChoices):
        DELIVERED = "delivered"
        GAVE_UP = "gave_up"
        STEP_BUDGET = "step_budget"
        TIME_BUDGET = "time_budget"
        ERROR = "error"
        ENDED_BY_SUBMITTER = "ended_by_submitter"

    battle = models.ForeignKey(
        Battle, null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    test_drive = models.ForeignKey(
        TestDrive, null=True, blank=True, on_delete=models.CASCADE, related_name="runs"
    )
    for_evaluation = models.BooleanField(
        default=False, help_text="A lane of an offline evaluation (neither battle nor drive)."
    )
    side = models.CharField(max_length=1, choices=[("A", "A"), ("B", "B")])
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="runs")
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    step_budget = models.PositiveIntegerField()
    wall_budget_s = models.PositiveIntegerField()
    input_digest = models.CharField(max_length=64, blank=True)
    # The submitter's follow-ups this lane received, in order (battles.parity.
    # conversation_digest over each one's sequence number and text): equal on both sides
    # of a battle when both got the same texts in the same order; empty for none.
    conversation_digest = models.CharField(max_length=64, blank=True, default="")
    # The initial state the lane started from (battles.snapshots); null for runs from
    # before snapshots, or once retention deleted it.
    snapshot = models.ForeignKey(
        "battles.RunSnapshot", null=True, blank=True, on_delete=models.SET_NULL, related_name="runs"
    )
    final_message = models.TextField(blank=True)
    end_reason = models.CharField(max_length=20, choices=EndReason.choices, blank=True)
    error = models.TextField(blank=True)
    # The lane ended in error through its agent's own fault (its provider failed or
    # could not be called, its endpoint was down, silent or broke the protocol), not
    # the sandbox's, the worker's or the other side's: it counts towards the agent's
    # automatic pause and as exposure for the matchmaker.
    agent_fault = models.BooleanField(default=False)
    # Set by the submitter from the live page; the lane stops before its next step.
    end_requested_at = models.DateTimeField(null=True, blank=True)
    delivered_files = models.JSONField(default=list, blank=True)
    egress_refusals = models.JSONField(
        default=list, blank=True, help_text="Destinations the egress proxy refused, with reasons."
    )
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    # An evaluation's lane beats here on every step (a battle's beats on the battle, a
    # drive's on the drive): an evaluation lane whose worker died is found by it.
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["battle", "side"], name="run_unique_battle_side"),
            models.CheckConstraint(
                condition=Q(battle__isnull=False, test_drive__isnull=True, for_evaluation=False)
                | Q(battle__isnull=True, test_drive__isnull=False, for_evaluation=False)
                | Q(battle__isnull=True, test_drive__isnull=True, for_evaluation=True),
                name="run_of_a_battle_a_test_drive_or_an_evaluation",
            ),
        ]
        indexes = [
            # The matchmaker's exposure: each active agent's failed battle lanes.
            models.Index(
                fields=["agent"],
                name="run_agent_fault",
                condition=Q(agent_fault=True, battle__isnull=False),
            ),
        ]
        ordering = ["side"]

    def __str__(self) -> str:
        if self.test_drive_id is not None:
            return f"Test drive {self.test_drive_id}"
        if self.for_evaluation:
            return f"Evaluation lane {self.pk}"
        return f"Battle {self.battle_id} side {self.side}"


class Step(models.Model):
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    tool = models.CharField(max_length=20)
    args = models.JSONField(default=dict)
    result = models.JSONField(default=dict)
    # The PNG taken after the step, its name in the private storage (never a public URL).
    screenshot = models.CharField(max_length=300, blank=True)
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "index"], name="step_unique_run_index")
        ]
        ordering = ["index"]

    def __str__(self) -> str:
        return f"{self.run} step {self.index}"


class TimedCall(models.Model):
    """What every span of the waterfall records of one timed call (a lane's here, an
    evaluation's in ``evals.models.EvalSpan``)."""

    name = models.CharField(max_length=200)
    input = models.JSONField(default=dict, blank=True)
    output = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField()
    latency_ms = models.PositiveIntegerField()
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)

    class Meta:
        abstract = True


class Span(TimedCall):
    """One timed operation of a run: a model call, a tool call or a remote exchange."""

    class Kind(models.TextChoices):
        MODEL = "model"
        TOOL = "tool"
        REMOTE = "remote"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="spans")
    step_index = models.PositiveIntegerField(null=True, blank=True)
    kind = models.CharField(max_length=10, choices=Kind.choices)

    class Meta:
        ordering = ["started_at", "pk"]
        indexes = [models.Index(fields=["run", "started_at"], name="span_run_time")]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} ({self.latency_ms} ms)"


# The coding battles' rows (a repo task's source, each run's diff and judged scores, the
# live phases) live in their own module; importing them here registers them.
from battles.coding_models import CodingOutcome, CodingPhase, RepoSource  # noqa: E402, F401
from battles.snapshot_models import RunSnapshot  # noqa: E402, F401


class FollowUp(models.Model):
    """A message the submitter's team sent to both sides of a running battle
    (docs/conversations.md). ``seq`` numbers a battle's follow-ups from 1 in the order
    they were committed; both lanes receive them in that order."""

    battle = models.ForeignKey(Battle, on_delete=models.CASCADE, related_name="follow_ups")
    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="+")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    seq = models.PositiveIntegerField()
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["battle", "seq"], name="follow_up_unique_battle_seq")
        ]
        ordering = ["seq"]

    def __str__(self) -> str:
        return f"{self.battle} follow-up {self.seq}"


class FollowUpReceipt(models.Model):
    """When one lane saw a follow-up: in the observation of its step ``step_index``."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="follow_up_receipts")
    follow_up = models.ForeignKey(FollowUp, on_delete=models.CASCADE, related_name="receipts")
    step_index = models.PositiveIntegerField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "follow_up"], name="follow_up_receipt_unique_run"
            )
        ]
        ordering = ["follow_up__seq"]

    def __str__(self) -> str:
        return f"{self.run} received follow-up {self.follow_up_id} at step {self.step_index}"


class Question(models.Model):
    """An agent's ``ask_user`` call: asked at step ``step_index`` of its run, answered
    by the battle's team for that side only, or not within its deadline."""

    class Status(models.TextChoices):
        PENDING = "pending"
        ANSWERED = "answered"
        UNANSWERED = "unanswered"  # the deadline passed, or the lane ended first

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="questions")
    battle = models.ForeignKey(Battle, on_delete=models.CASCADE, related_name="questions")
    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="+")
    step_index = models.PositiveIntegerField()
    text = models.TextField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    answer = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    asked_at = models.DateTimeField(auto_now_add=True)
    deadline_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "step_index"], name="question_unique_run_step")
        ]
        ordering = ["asked_at", "pk"]

    def __str__(self) -> str:
        return f"{self.run} question at step {self.step_index}"
