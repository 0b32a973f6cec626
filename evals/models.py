"""Offline evaluations: N roster agents × a task suite, scored by exact match, a rubric
judge and/or a pairwise judge. Everything belongs to a team and is private to it.

A suite and a rubric are stored with their file's bytes and SHA-256 (the identity the
run record cites); an evaluation has one ``EvalRun`` per (task, agent), stored as it
finishes, so that running an interrupted evaluation again does only what is missing.
A desktop task's run is a lane like a battle's (``EvalRun.lane``, a ``battles.Run``
with its steps, screenshots and spans), with the files the evaluation gave it
(``EvalAttachment``) and the result of the task's success command. A repo task's run is
a coding lane (docs/coding.md): its lane's ``coding`` outcome holds the diff and the
judge sandbox's scores; the task's source is a hidden ``battles.Task`` with its
``RepoSource`` (``EvalRepo``), and the task runs ``settings["replicates"]`` times per
agent (``EvalRun.replicate``) for pass@k.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Mod
from django.db.models.lookups import Exact

from battles.models import TimedCall
from evals.tournaments import FORMATS


class StoredFile(models.Model):
    """A team's file as it was loaded: its bytes, and their SHA-256 as its identity."""

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="%(class)ss")
    name = models.CharField(max_length=200, help_text="The file name it was loaded from.")
    sha256 = models.CharField(max_length=64)
    source = models.BinaryField(help_text="The file's bytes, as loaded.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        constraints = [
            models.UniqueConstraint(fields=["team", "sha256"], name="%(class)s_unique_team_hash")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.sha256[:12]})"


class Suite(StoredFile):
    tasks = models.JSONField(help_text="The parsed tasks (evals.suites.SuiteTask fields).")

    class Meta(StoredFile.Meta):
        pass


class Rubric(StoredFile):
    criteria = models.JSONField(help_text="[{name, description, scale, weight}, ...]")

    class Meta(StoredFile.Meta):
        pass


class Evaluation(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"  # every run and judgement finished (some may have failed)
        CANCELLED = "cancelled"

    team = models.ForeignKey("accounts.Team", on_delete=models.PROTECT, related_name="evaluations")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    suite = models.ForeignKey(Suite, on_delete=models.PROTECT, related_name="evaluations")
    rubric = models.ForeignKey(
        Rubric, null=True, blank=True, on_delete=models.PROTECT, related_name="evaluations"
    )
    judge = models.ForeignKey(
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The model that judges (rubric and pairwise); never one of the candidates.",
    )
    pairwise = models.BooleanField(default=False, help_text="Judge every pair of replies.")
    baseline = models.ForeignKey(
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Baseline-anchored pairwise judging: every candidate against this agent, "
        "5-level verdicts in both orders, the judge answering each task first.",
    )
    tournament = models.CharField(
        max_length=20,
        blank=True,
        choices=[(f, f) for f in FORMATS],
        help_text="The tournament format (evals.tournaments); empty: no tournament.",
    )
    best_of = models.PositiveSmallIntegerField(default=1, help_text="Games per series (odd).")
    seed = models.BigIntegerField(
        default=0, help_text="Seeds the bootstrap and the elimination seeded fallback."
    )
    opening = models.JSONField(
        null=True, blank=True, help_text="Single elimination's first-round pairs, when given."
    )
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    settings = models.JSONField(
        default=dict, help_text="max_tokens, attempts, concurrency: what the record cites."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["team", "-created_at"], name="evaluation_team_recent")]
        constraints = [
            models.CheckConstraint(
                condition=Q(best_of__gte=1, best_of__lte=99), name="evaluation_best_of_range"
            ),
            models.CheckConstraint(
                condition=Exact(Mod("best_of", 2), 1), name="evaluation_best_of_odd"
            ),
            models.CheckConstraint(condition=Q(seed__gte=0), name="evaluation_seed_nonnegative"),
            models.CheckConstraint(
                condition=Q(tournament="") | Q(rubric=None), name="evaluation_tournament_no_rubric"
            ),
        ]

    def __str__(self) -> str:
        return f"Evaluation {self.pk}"


class Candidate(models.Model):
    """An agent of an evaluation, in the order given (the record keeps it)."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="candidates")
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="+")
    position = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "agent"], name="candidate_unique"),
            models.UniqueConstraint(
                fields=["evaluation", "position"], name="candidate_unique_position"
            ),
        ]
        ordering = ["position"]

    def __str__(self) -> str:
        return f"Evaluation {self.evaluation_id} candidate {self.position}"


class EvalAttachment(models.Model):
    """A file a desktop task of the evaluation hands its lanes: ``path`` as the suite
    names it (relative to the suite file), ``name`` under /work/attachments in the
    sandbox, the bytes content-addressed under PRIVATE_MEDIA_ROOT
    (``evals/attachments/<team>/<sha256>``, shared by the team's evaluations)."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="attachments")
    task_id = models.CharField(max_length=200)
    position = models.PositiveIntegerField(help_text="Its place in the task's list.")
    path = models.CharField(max_length=500, help_text="As the suite names it.")
    name = models.CharField(max_length=120, help_text="Its name in /work/attachments.")
    sha256 = models.CharField(max_length=64)
    size = models.PositiveBigIntegerField()
    content_type = models.CharField(max_length=100)
    stored = models.CharField(max_length=300, help_text="Relative to PRIVATE_MEDIA_ROOT.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["evaluation", "task_id", "position"], name="eval_attachment_unique"
            )
        ]
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"{self.path} ({self.sha256[:12]}) of task {self.task_id}"


class EvalRepo(models.Model):
    """A repo task of the evaluation and its source: a ``battles.Task`` of kind repo
    owned by the evaluation's team, never admitted as a battle (no battle points at
    it), whose ``RepoSource`` the coding services prepare once and every lane and judge
    sandbox of the task clones."""

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="repos")
    task_id = models.CharField(max_length=200)
    source_task = models.OneToOneField(
        "battles.Task",
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Holds the RepoSource.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "task_id"], name="eval_repo_unique")
        ]

    def __str__(self) -> str:
        return f"repo task {self.task_id} of evaluation {self.evaluation_id}"


class EvalRun(models.Model):
    """One agent on one task of the suite: a chat task's answer, or a desktop task's
    lane (``lane``) and its success command's result (``success_*``: null when the task
    has none, or the sandbox never started), or one replicate of a repo task's coding
    lane (``lane``, its ``coding`` outcome holding the scores)."""

    class Status(models.TextChoices):
        DONE = "done"
        ERROR = "error"

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="runs")
    task_id = models.CharField(max_length=200)
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="+")
    status = models.CharField(max_length=10, choices=Status.choices)
    output = models.TextField(blank=True)
    error = models.TextField(blank=True)
    exact_score = models.FloatField(null=True, blank=True, help_text="1.0 or 0.0; null: no check")
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    attempts = models.PositiveIntegerField(default=1)
    replicate = models.PositiveSmallIntegerField(
        default=0, help_text="Which epoch of the task (0..epochs-1): each task runs k times."
    )
    scores = models.JSONField(
        default=dict,
        blank=True,
        help_text="Each scorer's result by its name: value in [0, 1], answer, explanation.",
    )
    usage = models.JSONField(
        default=dict,
        blank=True,
        help_text="Tokens in/out/cache, cost and directness of the run, whatever its kind.",
    )
    lane = models.OneToOneField(
        "battles.Run",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="eval_run",
        help_text="A desktop task's lane: its steps, screenshots and spans.",
    )
    success_exit_code = models.IntegerField(null=True, blank=True)
    success_output = models.TextField(blank=True, help_text="stdout then stderr, bounded.")
    success_error = models.TextField(blank=True, help_text="Why the command gave no exit code.")
    success_timed_out = models.BooleanField(null=True, blank=True)
    success_duration_ms = models.PositiveIntegerField(null=True, blank=True)
    success_score = models.FloatField(null=True, blank=True, help_text="1.0 iff exit code 0")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["evaluation", "task_id", "agent", "replicate"],
                name="evalrun_unique_task_agent_replicate",
            ),
            models.CheckConstraint(
                condition=Q(success_score__isnull=True, success_duration_ms__isnull=True)
                | Q(success_score=1.0, success_exit_code=0, success_duration_ms__isnull=False)
                | (
                    Q(success_score=0.0, success_duration_ms__isnull=False)
                    & (Q(success_exit_code__isnull=True) | ~Q(success_exit_code=0))
                ),
                name="evalrun_success_score_iff_exit_zero",
            ),
        ]
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"Evaluation {self.evaluation_id} task {self.task_id} agent {self.agent_id}"


class EvalSpan(TimedCall):
    """One model call of an evaluation, for the waterfall: a candidate's, a rubric
    judge's or a model-graded scorer's (``run`` set), a pairwise judge's (``pair`` set)
    or the baseline-anchored judge's own answer (``answer`` set)."""

    class Role(models.TextChoices):
        CANDIDATE = "candidate"
        RUBRIC = "rubric"
        PAIRWISE = "pairwise"
        ANSWER = "answer"  # the baseline-anchored judge's own answer to a task
        SCORER = "scorer"  # a model-graded scorer's call

    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="spans")
    run = models.ForeignKey(
        EvalRun, null=True, blank=True, on_delete=models.CASCADE, related_name="spans"
    )
    pair = models.ForeignKey(
        "PairJudgement", null=True, blank=True, on_delete=models.CASCADE, related_name="spans"
    )
    answer = models.ForeignKey(
        "JudgeAnswer", null=True, blank=True, on_delete=models.CASCADE, related_name="spans"
    )
    role = models.CharField(max_length=10, choices=Role.choices)

    class Meta:
        ordering = ["started_at", "pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(run__isnull=False, pair__isnull=True, answer__isnull=True)
                | Q(run__isnull=True, pair__isnull=False, answer__isnull=True)
                | Q(run__isnull=True, pair__isnull=True, answer__isnull=False),
                name="evalspan_of_a_run_a_pair_or_an_answer",
            )
        ]

    def __str__(self) -> str:
        return f"{self.role} {self.name} ({self.latency_ms} ms)"


class CriterionScore(models.Model):
    """The rubric judge's score of one run on one criterion (000 §3)."""

    class Status(models.TextChoices):
        OK = "ok"
        ERROR = "error"

    run = models.ForeignKey(EvalRun, on_delete=models.CASCADE, related_name="criterion_scores")
    criterion = models.CharField(max_length=200)
    score = models.IntegerField(null=True, blank=True)
    scale = models.PositiveIntegerField()
    weight = models.FloatField()
    justification = models.TextField(blank=True)
    rubric_sha256 = models.CharField(max_length=64)
    judge_model = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=Status.choices)
    error = models.TextField(blank=True)
    corrected = models.BooleanField(default=False)
    raw = models.JSONField(default=list, help_text="The judge's raw replies, in order.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "criterion"], name="criterion_score_unique"),
            models.CheckConstraint(
                condition=Q(status="error", score__isnull=True)
                | Q(status="ok", score__isnull=False, score__gte=0, score__lte=models.F("scale")),
                name="criterion_score_in_scale",
            ),
        ]

    def __str__(self) -> str:
        return f"Run {self.run_id} {self.criterion}: {self.score}"


class PairJudgement(models.Model):
    """One game of the pairwise judge on one task and one pair of agents (003): both
    orientations, the second mapped back to (A, B); resolved, or failed for good (never
    a draw). A tournament's series plays games 1, 2, ... of a pair (tie-breaks after
    the regulation games); a plain pairwise evaluation plays game 1 of every pair."""

    class Winner(models.TextChoices):
        A = "A"
        B = "B"
        TIE = "tie"

    evaluation = models.ForeignKey(
        Evaluation, on_delete=models.CASCADE, related_name="pair_judgements"
    )
    task_id = models.CharField(max_length=200)
    agent_a = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="+")
    agent_b = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="+")
    game = models.PositiveIntegerField(default=1, help_text="Its number in the pair's series.")
    epoch = models.PositiveSmallIntegerField(
        default=0, help_text="Which epoch's replies the game judges (EvalRun.replicate)."
    )
    winner = models.CharField(max_length=3, choices=Winner.choices, blank=True)
    ab_level = models.CharField(
        max_length=4,
        blank=True,
        help_text="5-level verdict of the (A, B) order: A>>B, A>B, A=B, B>A, B>>A; "
        "empty for a 3-level judge.",
    )
    ba_level = models.CharField(
        max_length=4, blank=True, help_text="The (B, A) order's 5-level verdict, mapped back."
    )
    agreement = models.BooleanField(null=True)
    ab_winner = models.CharField(max_length=3, blank=True)
    ba_winner = models.CharField(max_length=3, blank=True, help_text="Mapped back to (A, B).")
    ab_reason = models.TextField(blank=True)
    ba_reason = models.TextField(blank=True)
    ab_raw = models.JSONField(default=list)
    ba_raw = models.JSONField(default=list)
    failure = models.TextField(blank=True, help_text="Why the game failed; empty when resolved.")
    judge_model = models.CharField(max_length=200)
    duration_ms = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["evaluation", "task_id", "agent_a", "agent_b", "epoch", "game"],
                name="pair_judgement_unique_epoch_game",
            ),
            models.CheckConstraint(
                condition=Q(winner="", failure__gt="") | (~Q(winner="") & Q(failure="")),
                name="pair_judgement_resolved_or_failed",
            ),
        ]

    def __str__(self) -> str:
        return f"Task {self.task_id}: {self.agent_a_id} vs {self.agent_b_id} → {self.outcome}"

    @property
    def outcome(self) -> str:
        """As a tournament plays it: "A", "B", "tie", or "failed"."""
        return self.winner or "failed"


class JudgeAnswer(models.Model):
    """The judge's own answer to a task, asked before it judges the task's games in a
    baseline-anchored evaluation (arena-hard-auto: the judge answers first, and its
    answer is a reference in every judge prompt of the task)."""

    evaluation = models.ForeignKey(
        Evaluation, on_delete=models.CASCADE, related_name="judge_answers"
    )
    task_id = models.CharField(max_length=200)
    output = models.TextField(blank=True)
    error = models.TextField(blank=True, help_text="Why no answer; empty when answered.")
    judge_model = models.CharField(max_length=200)
    attempts = models.PositiveIntegerField(default=1)
    duration_ms = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["evaluation", "task_id"], name="judge_answer_unique_task"
            )
        ]
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"Judge answer to task {self.task_id} of evaluation {self.evaluation_id}"
