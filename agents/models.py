"""The roster: arenas (the scope of a leaderboard) and the agents entered in them."""

from datetime import timedelta

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

PUBLIC_ARENA_SLUG = "public"
# The demo board's arena (docs/leaderboard.md "The demo board").
DEMO_ARENA_SLUG = "demo"


class ArenaQuerySet(models.QuerySet):
    def public(self) -> "Arena":
        """The public arena (created by the first migration; recreated if a flushed
        database lost it)."""
        arena, _ = self.get_or_create(slug=PUBLIC_ARENA_SLUG, defaults={"name": "Public arena"})
        return arena

    def real(self) -> "ArenaQuerySet":
        """Every arena but the demo board's: its votes are simulated (``Arena.demo``)."""
        return self.filter(demo=False)


class Arena(models.Model):
    """One leaderboard's scope. The public arena exists from the first migration."""

    class BootstrapUnit(models.TextChoices):
        BATTLES = "battles", "What the interval treats as independent (battles, or judges)"
        TASKS = "tasks", "Whole tasks (all battles of a task together)"

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    # Team-private arenas come later; null means public.
    team = models.ForeignKey("accounts.Team", null=True, blank=True, on_delete=models.PROTECT)
    created_at = models.DateTimeField(auto_now_add=True)
    # The demo board (docs/leaderboard.md "The demo board"): simulated votes between the
    # built-ins, shown on the leaderboard until the public arena has ratings of its own.
    # Never exported, counted with the real arenas, matched into or judged.
    demo = models.BooleanField(
        default=False,
        editable=False,
        help_text="Holds the demo board's simulated votes: never exported or judged.",
    )
    # The machine judge of live battles (docs/evaluations.md, "Machine judges on live
    # battles"): a roster model that judges every battle opened for judging, its verdict
    # stored beside the votes (judging.models.MachineVerdict), never deciding the battle.
    machine_judge = models.ForeignKey(
        "Agent",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The roster model that judges live battles; empty: no machine judge.",
    )
    machine_judge_pairwise = models.BooleanField(
        default=True,
        help_text="The machine judge compares the two sides (both orders, 003's pairwise judge).",
    )
    machine_judge_rubric = models.JSONField(
        null=True,
        blank=True,
        help_text='Rubric criteria for the machine judge, [{"name", "description", "scale", '
        '"weight"}, ...]; empty: no rubric judging.',
    )
    machine_judge_rubric_sha256 = models.CharField(
        max_length=64,
        blank=True,
        editable=False,
        help_text="SHA-256 of the rubric's canonical JSON (what each rubric verdict cites).",
    )
    # What the board's bootstrap (its rank bands) resamples (docs/intervals.md, "Rank
    # bands"): by default what the published interval treats as independent; tasks when
    # a task's battles are alike (reruns of one task, a task shared across battles).
    bootstrap_unit = models.CharField(
        max_length=8,
        choices=BootstrapUnit.choices,
        default=BootstrapUnit.BATTLES,
        help_text="What the board's rank bands resample: battles (judges while the "
        "clustered interval is shown), or whole tasks, all battles of a task drawn together.",
    )

    objects = ArenaQuerySet.as_manager()

    def __str__(self) -> str:
        return self.name


class AgentQuerySet(models.QuerySet):
    def active(self) -> "AgentQuerySet":
        """Agents matchmaking may draw: approved, not paused, not retired."""
        return self.filter(retired_at=None, is_paused=False, approval=Agent.Approval.APPROVED)


class Agent(models.Model):
    class Kind(models.TextChoices):
        SCAFFOLD = "scaffold", "Model under the arena scaffold"
        REMOTE = "remote", "Remote system over HTTP"
        BUILTIN = "builtin", "Built-in offline agent"
        # Claude Code, Codex CLI or Aider (params["cli"]) run inside the run's sandbox on
        # a repo task, reaching its model only through the arena's gateway (docs/coding.md).
        CLI = "cli", "CLI coding agent in the sandbox"
        # A person, one of its team's baseline operators, driving the lane from the
        # operator page through the same fixed tool set (docs/human-baseline.md).
        HUMAN = "human", "Human baseline (a person at the operator page)"

    class Approval(models.TextChoices):
        APPROVED = "approved", "Approved"
        PENDING = "pending", "Waiting for an admin"
        REJECTED = "rejected", "Rejected"

    arena = models.ForeignKey(Arena, on_delete=models.PROTECT, related_name="agents")
    slug = models.SlugField(max_length=64)
    display_name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    provider = models.CharField(max_length=40, blank=True)
    model_id = models.CharField(max_length=200, blank=True)
    builtin_policy = models.CharField(
        max_length=40, blank=True, help_text="For built-in agents: the policy's registry name."
    )
    system_prompt = models.TextField(blank=True)
    tool_set = models.JSONField(
        default=list,
        blank=True,
        help_text="Tool names this agent is offered; empty means the whole fixed set.",
    )
    step_budget = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Empty: the arena default. Both sides of a battle get the same.",
    )
    wall_budget_s = models.PositiveIntegerField(null=True, blank=True)
    params = models.JSONField(
        default=dict,
        blank=True,
        help_text="Provider parameters (max_tokens, temperature, base_url, api_key_env, "
        "keep_screenshots) or, for remote agents, {'endpoint': URL}. Never a key itself.",
    )
    remote_secret = models.CharField(
        max_length=200,
        blank=True,
        help_text="HMAC secret the arena signs remote requests with (write-only in the admin).",
    )
    team = models.ForeignKey(
        "accounts.Team",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        help_text="The team that entered this agent; empty for the arena's own.",
    )
    is_baseline = models.BooleanField(default=False)
    is_paused = models.BooleanField(
        default=False, help_text="Temporarily out of matchmaking (an outage); not retired."
    )
    paused_reason = models.TextField(
        blank=True, help_text="Why it is paused, in words its team and the admins see."
    )
    failure_streak = models.PositiveIntegerField(
        default=0, help_text="Consecutive lanes that failed through this agent's fault."
    )
    approval = models.CharField(
        max_length=10,
        choices=Approval.choices,
        default=Approval.APPROVED,
        help_text="A team's own entry waits for an admin's approval before it is drawn.",
    )
    approval_note = models.TextField(blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    provider_key_encrypted = models.BinaryField(
        null=True,
        blank=True,
        editable=False,
        help_text="A team's own provider key, encrypted at rest (never shown again).",
    )
    aliases = models.JSONField(
        default=list, blank=True, help_text="Other names the identity-leak scanner looks for."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    objects = AgentQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["arena", "slug"], name="agent_unique_arena_slug"),
            models.CheckConstraint(
                condition=~Q(kind="builtin") | ~Q(builtin_policy=""),
                name="agent_builtin_has_policy",
            ),
        ]
        ordering = ["display_name"]

    def __str__(self) -> str:
        return self.display_name

    @property
    def is_active(self) -> bool:
        return (
            self.retired_at is None
            and not self.is_paused
            and self.approval == self.Approval.APPROVED
        )

    def identity_strings(self) -> list[str]:
        """Every string that would reveal this agent to a judge: its names, model id,
        aliases and the name of the team that entered it (the arena's own agents have
        none). Load ``team`` with the agent (``select_related``) when reading many."""
        team = self.team.name if self.team_id else ""
        names = [self.display_name, self.slug, self.model_id, *self.aliases, team]
        if self.kind == self.Kind.HUMAN:  # a person's own names would reveal the side too
            for user in [operator.user for operator in self.operators.select_related("user")]:
                names += [user.get_username(), user.get_full_name()]
        return [n for n in names if n]


class AgentStandingLogEntry(models.Model):
    """An operator changing an agent's standing on the roster (paused, retired, its arena
    or its entrant team), or the arena pausing it after consecutive failed lanes (no
    actor): what changed, who, when and why. Never edited."""

    STANDING_FIELDS = ("is_paused", "retired_at", "arena", "team")

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="standing_log")
    changes = models.JSONField(help_text='{"field": [before, after]} of the standing fields.')
    note = models.TextField()
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Empty: the arena itself (an automatic pause after failed lanes).",
    )
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-pk"]
        verbose_name_plural = "agent standing log"

    def __str__(self) -> str:
        return f"{self.agent}: {', '.join(self.changes)}"


class BaselineOperator(models.Model):
    """A team member who may drive the team's human entrant (an agent of kind
    ``human``): set by an admin. ``on_duty_since`` is set while the person is on
    duty; ``seen_at`` is the last time their operator page asked for news (the page
    polls): the matchmaker draws the human entrant only while one of its operators is
    on duty, seen recently and not already in a lane (docs/human-baseline.md)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="operators")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    on_duty_since = models.DateTimeField(null=True, blank=True)
    seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "user"], name="operator_unique_agent_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user} operates {self.agent}"


class HumanLaneQuerySet(models.QuerySet):
    # A lane whose wall budget ran out this long ago without an end is a dead worker's
    # (the battle janitor fails or re-queues its battle): it offers nothing any more.
    STALE_AFTER_S = 120

    def live(self) -> "HumanLaneQuerySet":
        """Lanes not ended, whose wall budget has not long run out."""
        since = timezone.now() - timedelta(seconds=self.STALE_AFTER_S)
        return self.filter(ended_at=None, deadline_at__gte=since)


class HumanLane(models.Model):
    """The lane a human entrant drives, as its policy (``agents.human.HumanPolicy``)
    shows it to the operator page: the current observation (the screen after the last
    step, the budgets left) and who took it. One row per run (an integer: the agents
    app sits below battles); a re-queued attempt starts it again."""

    run_id = models.BigIntegerField(unique=True)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="human_lanes")
    operator = models.ForeignKey(
        BaselineOperator, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    instruction = models.TextField()
    tools = models.JSONField(default=list, help_text="The tools this lane offers.")
    step = models.PositiveIntegerField(default=0)
    steps_left = models.PositiveIntegerField(default=0)
    deadline_at = models.DateTimeField(help_text="When the lane's wall budget runs out.")
    screenshot = models.BinaryField(null=True, blank=True, editable=False)
    last_result = models.JSONField(null=True, blank=True)
    # The page's url, title and on-screen elements (name, role, x, y) when the entrant
    # observes the page as text (params observe: page_text): the page offers a click on each.
    page = models.JSONField(null=True, blank=True)
    # The submitter's follow-ups this lane received ({seq, text}, in order): the
    # operator reads them as an agent reads ``Observation.messages``.
    messages = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField()
    take_by = models.DateTimeField(
        help_text="Untaken by then, the lane ends (the entrant's failure)."
    )
    taken_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = HumanLaneQuerySet.as_manager()

    def __str__(self) -> str:
        return f"human lane of run {self.run_id}"


class HumanAction(models.Model):
    """One action an operator submitted for a lane: the policy's next action, consumed
    exactly once (a conditional UPDATE of ``consumed_at``). At most one waits at a
    time per lane."""

    lane = models.ForeignKey(HumanLane, on_delete=models.CASCADE, related_name="actions")
    operator = models.ForeignKey(BaselineOperator, on_delete=models.CASCADE, related_name="+")
    step = models.PositiveIntegerField(help_text="The step it was submitted for.")
    tool = models.CharField(max_length=20)
    args = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    consumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["lane"], condition=Q(consumed_at=None), name="human_action_one_waiting"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tool} for {self.lane}"
