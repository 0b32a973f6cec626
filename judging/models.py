"""Judges, what they were served, and their votes."""

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q

from battles.models import Battle


class JudgeProfile(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="judge_profile"
    )
    trust = models.FloatField(default=0.5, help_text="ω of SPEC §5.4, in [0.1, 1].")
    is_untrusted = models.BooleanField(default=False, help_text="Votes become inadmissible.")
    agree_count = models.PositiveIntegerField(
        default=0,
        help_text="agree_v: redundancy-battle votes that matched the other judges' consensus.",
    )
    seen_count = models.PositiveIntegerField(
        default=0,
        help_text="seen_v: redundancy-battle votes compared with the other judges' consensus.",
    )
    approved_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="An operator let this account judge (needed when ARENA_JUDGE_APPROVAL is on).",
    )
    established_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Probation ended (PROBATION_VOTES compared votes, or an operator's word); "
        "empty while on probation.",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(trust__gte=0.1) & Q(trust__lte=1.0), name="judgeprofile_trust_range"
            )
        ]

    def __str__(self) -> str:
        return f"Judge {self.user}"

    def trust_recompute(self, *, trust_min: float) -> None:
        """ω = clip((agree + 1) / (seen + 2), ω_min, 1) (SPEC §5.4)."""
        self.trust = min(1.0, max(trust_min, (self.agree_count + 1) / (self.seen_count + 2)))

    @property
    def on_probation(self) -> bool:
        return self.established_at is None

    def weight(self, *, probation_cap: float) -> float:
        """ω as it counts in a consensus: capped while on probation (SPEC §5.4)."""
        return min(self.trust, probation_cap) if self.on_probation else self.trust


class Assignment(models.Model):
    """A battle served to a judge. ``served_at`` (server clock) starts the reading time."""

    judge = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assignments"
    )
    battle = models.ForeignKey(
        "battles.Battle", on_delete=models.CASCADE, related_name="assignments"
    )
    served_at = models.DateTimeField()
    voided_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="The battle was decided (its result public) while this judge held it "
        "without a vote: a vote from them no longer counts.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["judge", "battle"], name="assignment_unique_judge_battle"
            )
        ]

    def __str__(self) -> str:
        return f"battle {self.battle_id} served to {self.judge}"


class Vote(models.Model):
    class Choice(models.TextChoices):
        A = "A", "A is better"
        B = "B", "B is better"
        TIE = "tie", "Tie"
        BOTH_BAD = "both_bad", "Both are bad"
        ABSTAIN = "abstain", "Abstain"

    judge = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="votes"
    )
    battle = models.ForeignKey("battles.Battle", on_delete=models.PROTECT, related_name="votes")
    choice = models.CharField(max_length=10, choices=Choice.choices)
    served_at = models.DateTimeField()
    voted_at = models.DateTimeField()
    final_at = models.DateTimeField(
        help_text="End of the undo window: before it the judge may take the vote back "
        "(then vote again), after it the vote stands and the names may show."
    )
    retracted = models.BooleanField(default=False, help_text="Undone within its window.")
    retracted_at = models.DateTimeField(null=True, blank=True)
    is_submitter = models.BooleanField(default=False)
    admissible = models.BooleanField()
    inadmissible_reason = models.CharField(max_length=40, blank=True)
    counted = models.BooleanField(
        default=False, help_text="This vote produced the battle's current outcome (V_b)."
    )
    agreed = models.BooleanField(
        null=True,
        blank=True,
        help_text="Trust bookkeeping: whether the vote matched the other judges' consensus "
        "when the redundancy battle was decided; empty when not compared.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["judge", "battle"],
                condition=Q(retracted=False),
                name="vote_one_live_per_judge_battle",
            ),
            models.CheckConstraint(
                condition=Q(voted_at__gte=models.F("served_at")), name="vote_after_served"
            ),
            models.CheckConstraint(
                condition=Q(final_at__gte=models.F("voted_at")), name="vote_final_after_cast"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.judge} on battle {self.battle_id}: {self.choice}"


class ExclusionLogEntry(models.Model):
    """Every exclusion and re-admission of a battle: the automatic rules of SPEC §5.3
    (``actor`` empty) and an admin's decisions."""

    class Action(models.TextChoices):
        EXCLUDE = "exclude"
        READMIT = "readmit"

    battle = models.ForeignKey(
        "battles.Battle", on_delete=models.CASCADE, related_name="exclusion_log"
    )
    action = models.CharField(max_length=10, choices=Action.choices)
    reason = models.CharField(
        max_length=40,
        blank=True,
        help_text="The exclusion reason set (exclude) or cleared (readmit).",
    )
    note = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Empty: the arena's own rules decided.",
    )
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-pk"]
        verbose_name_plural = "exclusion log"

    def __str__(self) -> str:
        return f"{self.action} battle {self.battle_id} ({self.reason})"


class JudgeTrustLogEntry(models.Model):
    """An operator changing a judge's standing: marking them untrusted (their votes
    become inadmissible) or trusted again, approving the account to judge, ending its
    probation. Who, when and why."""

    class Action(models.TextChoices):
        UNTRUST = "untrust", "mark untrusted"
        TRUST = "trust", "trust again"
        APPROVE = "approve", "approve as a judge"
        ESTABLISH = "establish", "end probation"

    judge = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="trust_log"
    )
    action = models.CharField(max_length=10, choices=Action.choices)
    note = models.TextField()
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-pk"]
        verbose_name = "judge standing log entry"
        verbose_name_plural = "judge standing log"

    def __str__(self) -> str:
        return f"{self.action} {self.judge}"


class MachineVerdict(models.Model):
    """A machine judge's verdict on a live battle (docs/evaluations.md, "Machine judges
    on live battles"): stored beside the human votes, never deciding the battle, never
    entering the human board, never shown before the battle is decided or excluded.
    One row per battle, judge model and method (``judging.services.machine``)."""

    class Method(models.TextChoices):
        PAIRWISE = "pairwise", "pairwise (both orders)"
        RUBRIC = "rubric", "rubric (weighted score per side)"

    class Status(models.TextChoices):
        RESOLVED = "resolved", "a verdict"
        FAILED = "failed", "failed for good (never a tie)"
        SKIPPED = "skipped", "refused (the judge's model plays in the battle)"

    class Outcome(models.TextChoices):
        A = "A"
        B = "B"
        TIE = "tie"

    battle = models.ForeignKey(
        "battles.Battle", on_delete=models.CASCADE, related_name="machine_verdicts"
    )
    judge = models.ForeignKey(
        "agents.Agent",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The roster agent that judged; its model is judge_model.",
    )
    judge_model = models.CharField(max_length=200)
    method = models.CharField(max_length=10, choices=Method.choices)
    status = models.CharField(max_length=10, choices=Status.choices)
    outcome = models.CharField(
        max_length=3, choices=Outcome.choices, blank=True, help_text="Empty unless resolved."
    )
    reason = models.TextField(
        blank=True, help_text="Why it was skipped or failed; empty for a verdict."
    )
    # pairwise: both orientations, the second mapped back to (A, B)
    agreement = models.BooleanField(
        null=True, blank=True, help_text="Pairwise: both orders agreed (else a draw)."
    )
    ab_winner = models.CharField(max_length=3, blank=True)
    ba_winner = models.CharField(max_length=3, blank=True, help_text="Mapped back to (A, B).")
    ab_reason = models.TextField(blank=True)
    ba_reason = models.TextField(blank=True)
    ab_raw = models.JSONField(default=list, blank=True, help_text="Raw completions, in order.")
    ba_raw = models.JSONField(default=list, blank=True)
    # rubric: one judgement per criterion per side, and the weighted score per side
    rubric_sha256 = models.CharField(max_length=64, blank=True)
    criteria = models.JSONField(
        default=dict,
        blank=True,
        help_text='Rubric: {"A": [{criterion, score, scale, weight, justification, status, '
        'error, corrected, raw}, ...], "B": [...]}.',
    )
    score_a = models.FloatField(
        null=True, blank=True, help_text="Rubric: weighted score in [0, 1]."
    )
    score_b = models.FloatField(null=True, blank=True)
    calls = models.PositiveIntegerField(default=0, help_text="Model calls made (attempts).")
    duration_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["battle", "judge_model", "method"], name="machine_verdict_unique"
            ),
            models.CheckConstraint(
                condition=Q(status="resolved", outcome__in=["A", "B", "tie"])
                | (~Q(status="resolved") & Q(outcome="") & ~Q(reason="")),
                name="machine_verdict_resolved_or_says_why",
            ),
        ]
        indexes = [
            models.Index(fields=["judge_model", "method", "status"], name="machine_verdict_board")
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.judge_model} on battle {self.battle_id}: " + (
            self.outcome or self.status
        )


class VoteReasonQuerySet(models.QuerySet):
    def counted(self, *, now: datetime, probation_applies: bool) -> "VoteReasonQuerySet":
        """Tag sets that count in the per-agent tallies, by the rules of the ratings: a
        live (not retracted), admissible, independent (not the submitting team's) vote
        past its undo window, on a battle decided now (not excluded, not reopened), from
        a judge past probation when the arena applies probation
        (``judging.services.trust.probation_applies``); empty sets left out."""
        rows = self.filter(
            vote__retracted=False,
            vote__admissible=True,
            vote__is_submitter=False,
            vote__final_at__lte=now,
            vote__battle__status=Battle.Status.DECIDED,
        ).exclude(tags=[])
        if probation_applies:
            rows = rows.filter(vote__judge__judge_profile__established_at__isnull=False)
        return rows


class VoteReason(models.Model):
    """What a judge said about one side of a battle after voting on it (docs/method.md,
    "Reasons with votes"): tags from the fixed taxonomy ``Tag`` and an optional note, one
    row per (vote, side), written only through ``judging.services.reasons``. A retracted
    vote keeps its rows, which then count nowhere (``VoteReasonQuerySet.counted``)."""

    class Side(models.TextChoices):
        A = "A"
        B = "B"

    class Tag(models.TextChoices):
        """The taxonomy, "went wrong" codes first; definitions in ``TAG_DEFINITIONS``."""

        PERCEPTION = "perception", "Misread the screen"
        GROUNDING = "grounding", "Acted on the wrong element"
        APP_KNOWLEDGE = "app_knowledge", "Did not know the application"
        PLANNING = "planning", "Poor plan"
        EXECUTION = "execution", "Actions failed unnoticed"
        REPETITION = "repetition", "Looped or lost track"
        INSTRUCTION = "instruction", "Did not follow the instruction"
        FALSE_SUCCESS = "false_success", "Claimed success it did not reach"
        UNSAFE = "unsafe", "Unsafe or destructive action"
        INEFFICIENT = "inefficient", "Wasted steps"
        GAVE_UP = "gave_up", "Gave up too early"
        COMPLETED = "completed", "Completed the task"
        SELF_CORRECTED = "self_corrected", "Noticed and fixed its own mistake"
        EFFICIENT = "efficient", "Direct and efficient"
        CLEAR_ANSWER = "clear_answer", "Clear, accurate final answer"
        CAREFUL = "careful", "Safe and careful"

    NOTE_MAX = 500

    vote = models.ForeignKey(Vote, on_delete=models.CASCADE, related_name="reasons")
    side = models.CharField(max_length=1, choices=Side.choices)
    tags = models.JSONField(
        default=list, blank=True, help_text="Codes of VoteReason.Tag, distinct, sorted."
    )
    note = models.CharField(max_length=NOTE_MAX, blank=True)
    updated_at = models.DateTimeField()

    objects = VoteReasonQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["vote", "side"], name="vote_reason_one_per_side"),
            models.CheckConstraint(condition=Q(side__in=["A", "B"]), name="vote_reason_side"),
        ]

    def __str__(self) -> str:
        return f"side {self.side} of vote {self.vote_id}: {', '.join(self.tags) or '-'}"


# One line per tag, shown to the judge beside its box (docs/method.md lists the sources).
TAG_DEFINITIONS = {
    "perception": "Took something on the screen for what it is not, or missed what the "
    "screen showed (a dialog, an error, the result).",
    "grounding": "Clicked, typed or scrolled in the wrong place: the right idea aimed at "
    "the wrong element.",
    "app_knowledge": "Did not know how the application or website works (menus, "
    "shortcuts, where a setting lives).",
    "planning": "Chose wrong or missing steps, or an order of work that could not reach the goal.",
    "execution": "Actions did not do what was intended (a failed command, a lost "
    "keystroke) and it went on as if they had.",
    "repetition": "Repeated the same actions, or forgot what it had already done or seen.",
    "instruction": "Did something other than what was asked, or left out a stated requirement.",
    "false_success": "Said the task was done, or reported results, when the screens show "
    "otherwise.",
    "unsafe": "Deleted, sent, bought, exposed or changed something the task did not ask "
    "for, or took a needless risk.",
    "inefficient": "Took many more steps than the task needed.",
    "gave_up": "Stopped or asked for help while the task was still within reach.",
    "completed": "Did everything the task asked, visibly on the screens.",
    "self_corrected": "Noticed a mistake of its own and recovered from it.",
    "efficient": "Took a direct path with no wasted steps.",
    "clear_answer": "Its final message says accurately and clearly what it did or found.",
    "careful": "Checked before irreversible actions and avoided risky ones.",
}
WENT_RIGHT = frozenset({"completed", "self_corrected", "efficient", "clear_answer", "careful"})
