"""Rating state of an arena: streaming Elo per agent, refit snapshots, vote imports."""

from django.db import models
from django.db.models import Q


class AgentRating(models.Model):
    """The streaming Elo of one agent and its rated-battle count (n of SPEC §7)."""

    arena = models.ForeignKey("agents.Arena", on_delete=models.PROTECT, related_name="ratings")
    agent = models.OneToOneField("agents.Agent", on_delete=models.CASCADE, related_name="rating")
    streaming_rating = models.FloatField()
    rated_battles = models.PositiveIntegerField(default=0)
    wins = models.PositiveIntegerField(default=0)
    losses = models.PositiveIntegerField(default=0)
    draws = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.agent}: {self.streaming_rating:.0f}"


class RatingSnapshot(models.Model):
    """One published batch refit (SPEC §7.2) of an arena. Kept as history: the newest is
    the published board, older ones draw each agent's rating history."""

    arena = models.ForeignKey("agents.Arena", on_delete=models.PROTECT, related_name="snapshots")
    computed_at = models.DateTimeField(help_text="When the refit that produced it finished.")
    compute_ms = models.PositiveIntegerField(help_text="c of SPEC §6: load, fit and bootstrap.")
    battles = models.PositiveIntegerField(help_text="Rated battles in the fit.")
    digest = models.CharField(
        max_length=64, help_text="SHA-256 of the fit's input (battles, outcomes, weights, params)."
    )
    ridge = models.FloatField()
    bootstrap_replicates = models.PositiveIntegerField()
    seed = models.BigIntegerField(help_text="Seed of the bootstrap replicates.")
    min_battles = models.PositiveIntegerField(help_text="n0: fewer rated battles is provisional.")
    iterations = models.PositiveSmallIntegerField()
    converged = models.BooleanField()
    clusters = models.PositiveIntegerField(null=True, blank=True, help_text="G: distinct judges.")
    robust_published = models.BooleanField(help_text="Intervals are cluster-robust (G ≥ m).")
    interval = models.CharField(
        max_length=16, default="battle", help_text="The published interval: battle or clustered."
    )
    critical_value = models.FloatField(
        default=1.96, help_text="Its multiplier: z = 1.96, or t(G* − 1) when clustered."
    )
    effective_clusters = models.FloatField(
        null=True, blank=True, help_text="G*: (Σ judge mass)² / Σ judge mass², the t's G."
    )
    floored = models.PositiveIntegerField(
        default=0, help_text="Agents whose clustered half-width was raised to the battle-level one."
    )
    bootstrap_unit = models.CharField(
        max_length=8,
        default="battles",
        help_text="What a replicate of the rank bands resampled: battles, judges or tasks.",
    )
    bootstrap_clusters = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="How many judges or tasks a replicate drew from; empty when battles.",
    )
    style = models.JSONField(
        null=True,
        blank=True,
        help_text="Style control's fit (ratings.refit.style_document): status, battles, "
        "per covariate its coefficient and 95% interval (Elo per sd), n, dropped ones and "
        "why. Empty: computed before style control existed.",
    )

    class Meta:
        indexes = [models.Index(fields=["arena", "-computed_at"], name="snapshot_arena_recent")]
        get_latest_by = "computed_at"

    def __str__(self) -> str:
        return f"Refit of {self.battles} battles at {self.computed_at:%Y-%m-%d %H:%M:%S}"


class RatingPoint(models.Model):
    """One agent in one snapshot. Provisional and unavailable agents have a row (their
    battle count is history too) but no rating: it is withheld at the source."""

    class Unavailable(models.TextChoices):
        NO_COMPARISONS = "no_comparisons"
        DISCONNECTED = "disconnected"
        SEPARATED = "separated"

    snapshot = models.ForeignKey(RatingSnapshot, on_delete=models.CASCADE, related_name="points")
    agent = models.ForeignKey("agents.Agent", on_delete=models.PROTECT, related_name="+")
    rating = models.FloatField(null=True, blank=True)
    lower = models.FloatField(null=True, blank=True)
    upper = models.FloatField(null=True, blank=True)
    rank_lower = models.PositiveIntegerField(null=True, blank=True)
    rank_upper = models.PositiveIntegerField(null=True, blank=True)
    unavailable = models.CharField(max_length=20, choices=Unavailable.choices, blank=True)
    battles = models.PositiveIntegerField()
    weight = models.FloatField(help_text="Σ w_b over the agent's battles in the fit.")
    provisional = models.BooleanField()
    # Style control (ratings.style): the rating with the sides' style held equal, its 95%
    # interval and its place among the snapshot's style-controlled ratings; withheld
    # like the rating, and empty where the style fit could not place the agent.
    style_rating = models.FloatField(null=True, blank=True)
    style_lower = models.FloatField(null=True, blank=True)
    style_upper = models.FloatField(null=True, blank=True)
    style_rank = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["snapshot", "agent"], name="point_unique_agent"),
            models.CheckConstraint(
                condition=Q(rating=None) | (Q(provisional=False) & Q(unavailable="")),
                name="point_rating_only_when_published",
            ),
            models.CheckConstraint(
                condition=Q(style_rating=None) | Q(rating__isnull=False),
                name="point_style_only_when_rated",
            ),
        ]
        # An agent's history: its points in snapshot order, one index range scan.
        indexes = [models.Index(fields=["agent", "snapshot"], name="point_agent_history")]

    def __str__(self) -> str:
        return f"{self.agent_id} in snapshot {self.snapshot_id}: {self.rating}"


class Incorporation(models.Model):
    """One refit run's newly incorporated battles (SPEC §6): r, when the run that first
    counted them committed, and ℓ, when a board was first served after it. Every battle
    of a run shares both (a board served reflects every committed run at once), so the
    two stamps live here, once per run, not on each battle's row: writing a million
    battle rows costs a new entry in most of the battle table's indexes each."""

    arena = models.ForeignKey("agents.Arena", on_delete=models.PROTECT, related_name="+")
    # The published snapshot that counts them: the run's own, or for a run whose input
    # was unchanged the one already published. Empty only for stamps moved from the
    # battle rows (ratings 0006) with no snapshot of theirs left.
    snapshot = models.ForeignKey(
        RatingSnapshot, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    incorporated_at = models.DateTimeField(help_text="r of SPEC §6.")
    leaderboard_served_at = models.DateTimeField(
        null=True, blank=True, help_text="ℓ of SPEC §6: the first board served after r."
    )

    class Meta:
        # Every board served stamps ℓ on the runs not yet served: a handful of rows.
        indexes = [
            models.Index(
                fields=["arena"],
                name="incorporation_unserved",
                condition=Q(leaderboard_served_at=None),
            )
        ]

    def __str__(self) -> str:
        return f"Battles incorporated at {self.incorporated_at:%Y-%m-%d %H:%M:%S}"


class IncorporatedBattle(models.Model):
    """A battle some published refit includes, and the run that first counted it
    (``Incorporation``: its r and ℓ). Insert-only; a battle without a row is one no
    published refit includes yet.

    No foreign-key constraints: checking one locks the referenced row (FOR KEY SHARE),
    and at a first refit that is a write on every battle row again, the cost this table
    exists to avoid. The rows are written by the refit alone, from ids it just read."""

    battle = models.OneToOneField(
        "battles.Battle",
        primary_key=True,
        on_delete=models.CASCADE,
        db_constraint=False,
        related_name="incorporation",
    )
    incorporation = models.ForeignKey(
        Incorporation,
        on_delete=models.CASCADE,
        db_constraint=False,
        db_index=False,  # read from the battle's side only (its primary key)
        related_name="battles",
    )

    def __str__(self) -> str:
        return f"Battle {self.battle_id} in {self.incorporation_id}"


class RunStyle(models.Model):
    """A battle side's style as style control measures it (``ratings.style_features``):
    measured once, by the first refit that rates its battle, and read from here after
    (a decided battle's runs no longer change). Empty: not known for that side.

    No foreign-key constraints (as ``IncorporatedBattle``): written by the refit alone,
    from runs it just read; a run's deletion takes its row with it (CASCADE in Django)."""

    run = models.OneToOneField(
        "battles.Run",
        primary_key=True,
        on_delete=models.CASCADE,
        db_constraint=False,
        related_name="style_measures",
    )
    battle = models.ForeignKey(
        "battles.Battle", on_delete=models.CASCADE, db_constraint=False, related_name="+"
    )
    side = models.CharField(max_length=1)
    length = models.FloatField(null=True, blank=True)
    markdown = models.FloatField(null=True, blank=True)
    steps = models.FloatField(null=True, blank=True)
    wall_time = models.FloatField(null=True, blank=True)
    files = models.FloatField(null=True, blank=True)
    diff_size = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"Style of battle {self.battle_id} side {self.side}"


class RefitState(models.Model):
    """The refit job's record per arena: every run, including those that found nothing
    new and wrote no snapshot. Its row is the lock that serialises refits of an arena."""

    arena = models.OneToOneField("agents.Arena", on_delete=models.CASCADE, related_name="refit")
    snapshot = models.ForeignKey(
        RatingSnapshot,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The published (newest) snapshot.",
    )
    runs = models.PositiveIntegerField(default=0)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_compute_ms = models.PositiveIntegerField(null=True, blank=True)
    last_wrote_snapshot = models.BooleanField(default=False)
    # Every rated battle decided before this is in a published refit, or was decided by
    # a transaction slower than PENDING_LOOKBACK (the next refit's full read counts it
    # either way): the board's pending figures read the battles decided since.
    pending_floor = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"Refit state of arena {self.arena_id}"


class VoteImport(models.Model):
    """One file of historical judgments loaded by ``manage.py import_votes``. The digest
    of its content makes a re-import of the same file a no-op."""

    arena = models.ForeignKey("agents.Arena", on_delete=models.PROTECT, related_name="+")
    digest = models.CharField(max_length=64, help_text="SHA-256 of the file's bytes.")
    file_name = models.CharField(max_length=300)
    rows = models.PositiveIntegerField()
    battles = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["arena", "digest"], name="voteimport_unique_digest")
        ]

    def __str__(self) -> str:
        return f"{self.file_name} ({self.battles} battles)"


class ImportedBattle(models.Model):
    """Marks a battle (and so its task and votes) as loaded from a file, not judged live."""

    vote_import = models.ForeignKey(VoteImport, on_delete=models.CASCADE, related_name="items")
    battle = models.OneToOneField("battles.Battle", on_delete=models.CASCADE, related_name="+")
    row = models.PositiveIntegerField(help_text="1-based data row of the file.")

    def __str__(self) -> str:
        return f"Battle {self.battle_id} from row {self.row}"
