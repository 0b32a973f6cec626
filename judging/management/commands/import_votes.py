"""``manage.py import_votes FILE.csv``: historical judgments into an arena.

The file and its column mapping are read by the offline CLI's parser
(``ratings.cli.read_battles``: same flags, same defaults, same errors). Each data row
becomes a decided Battle with its outcome and evidence weight, on a Task of the import
team (one per distinct --task value, else one for the file), with one admissible Vote
by the judge user ``import:<judge value>`` (``import:unknown`` without --judge). Rows
are marked as imported (ratings.ImportedBattle under a VoteImport). Each battle is
decided through ``judging.services.battle_decide`` (source "import"), so the streaming
Elo takes the battles in file order; the next refit publishes them and stamps r.

Agents are matched by slug, then by display name. Unknown names stop the import with
their list, unless --create-agents is given: then each becomes a retired built-in
placeholder (idle policy, never matched, off the board, its battles in the fit).

The file is read once, with the CLI's checks (UTF-8, strict CSV quoting, rows no
shorter than the header, no repeated column names): a bad file stops the import with a
one-line CommandError before anything is written. Duplicate rows and rows with extra
cells are imported and reported (one warning line each on stderr); --strict refuses
them instead.

All in one transaction; the SHA-256 of the file's bytes makes a second import of the
same file a no-op. A progress bar goes to stderr.
"""

import sys
from collections import OrderedDict
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify
from tqdm import tqdm

from accounts.models import Team
from agents.models import Agent, Arena
from battles.models import Battle, Task
from battles.similarity import signature, trigrams
from judging.models import Vote
from judging.services import battle_decide
from ratings import cli
from ratings.models import ImportedBattle, VoteImport
from ratings.services import leaderboard_push

IMPORT_TEAM = "import:historical-votes"
IMPORT_SUBMITTER = "import:submitter"
UNKNOWN_JUDGE = "unknown"
OUTCOME = {1.0: Battle.Outcome.A, 0.0: Battle.Outcome.B, 0.5: Battle.Outcome.TIE}


def _outcome(y: float, value: str) -> str:
    """The stored label. Both enter the fit as ½, but SPEC §7 keeps both_bad distinct
    in storage: a --tie value spelled "both_bad" (any case; space or hyphen for the
    underscore) is stored as both_bad, every other --tie value as tie."""
    if y == 0.5 and value.strip().lower().replace(" ", "_").replace("-", "_") == "both_bad":
        return Battle.Outcome.BOTH_BAD
    return OUTCOME[y]


# Flags passed through to the offline CLI's parser (dest → flag).
MAPPING_FLAGS = {
    "a": "--a",
    "b": "--b",
    "winner": "--winner",
    "win_a": "--win-a",
    "win_b": "--win-b",
    "tie": "--tie",
    "skip": "--skip",
    "judge": "--judge",
    "task": "--task",
    "weight": "--weight",
}


class Command(BaseCommand):
    help = (
        "Load historical pairwise judgments from a CSV file into an arena as decided, "
        "imported battles. Column flags as for `python -m ratings fit`."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", type=Path, metavar="FILE.csv")
        columns = parser.add_argument_group("columns and values (defaults: python -m ratings)")
        columns.add_argument("--a", metavar="COL", help="side A's agent (agent_a)")
        columns.add_argument("--b", metavar="COL", help="side B's agent (agent_b)")
        columns.add_argument("--winner", metavar="COL", help="the outcome (winner)")
        columns.add_argument("--win-a", metavar="VALUE", help="outcome: A won (A)")
        columns.add_argument("--win-b", metavar="VALUE", help="outcome: B won (B)")
        columns.add_argument(
            "--tie", metavar="VALUES", help="comma-separated tie outcomes (tie,both_bad)"
        )
        columns.add_argument(
            "--skip", metavar="VALUES", help="comma-separated outcomes whose rows are dropped"
        )
        columns.add_argument("--judge", metavar="COL", help="the judge: user import:<value>")
        columns.add_argument("--task", metavar="COL", help="the task text")
        columns.add_argument("--weight", metavar="COL", help="evidence weight w_b ≥ 0 (1)")
        parser.add_argument(
            "--arena", default=None, metavar="SLUG", help="the arena (default: public)"
        )
        parser.add_argument(
            "--create-agents",
            action="store_true",
            help="create unknown agents as retired built-in placeholders instead of stopping",
        )
        parser.add_argument(
            "--strict",
            action="store_true",
            help="refuse duplicate rows and rows with more fields than the header instead "
            "of importing and reporting them",
        )

    def handle(self, *args, **options) -> None:
        path: Path = options["file"]
        argv = ["fit", str(path)]
        for dest, flag in MAPPING_FLAGS.items():
            if options[dest] is not None:
                argv.append(f"{flag}={options[dest]}")  # one token: a value may start with -
        argv += ["--cluster", "judge" if options["judge"] else "none"]
        if options["strict"]:
            argv.append("--strict")
        mapping = cli.build_parser().parse_args(argv)
        try:
            parsed = cli.read_battles(mapping)
        except cli.CliError as exc:
            raise CommandError(str(exc)) from exc
        for warning in parsed.report.warnings():
            self.stderr.write(warning)
        digest = parsed.sha256
        winners = parsed.winners
        judges = parsed.judges or [UNKNOWN_JUDGE] * len(winners)
        tasks = parsed.tasks or [""] * len(winners)
        arena = (
            Arena.objects.public()
            if options["arena"] is None
            else Arena.objects.filter(slug=options["arena"]).first()
        )
        if arena is None:
            raise CommandError(f"no arena {options['arena']!r}; pass an existing arena slug")
        if VoteImport.objects.filter(arena=arena, digest=digest).exists():
            self.stdout.write(f"{path} was imported already (sha256 {digest[:12]}): nothing to do.")
            return
        try:
            with transaction.atomic():
                vote_import = self._import(
                    arena, path, digest, parsed, judges, tasks, winners, options["create_agents"]
                )
        except IntegrityError as exc:
            if VoteImport.objects.filter(arena=arena, digest=digest).exists():
                self.stdout.write(f"{path} was imported at the same time: nothing to do.")
                return
            raise CommandError(f"the import failed and was rolled back: {exc}") from exc
        leaderboard_push(arena_id=arena.pk)
        self.stdout.write(
            f"Imported {vote_import.battles} battles from {path} into {arena.slug} "
            f"({parsed.skipped} rows skipped); the next refit publishes them."
        )

    def _import(
        self, arena, path, digest, parsed, judges, tasks, winners, create_agents
    ) -> VoteImport:
        agents = _agents_by_name(arena, parsed.agents, create=create_agents)
        now = timezone.now()
        team = _import_team()
        submitter = _user(IMPORT_SUBMITTER)
        judge_users = {
            value: _user(f"import:{value}"[:150]) for value in OrderedDict.fromkeys(judges)
        }
        task_rows = {}
        for value in OrderedDict.fromkeys(tasks):
            text = value or f"Imported judgments from {path.name} (the file names no task)."
            task_rows[value] = Task.objects.create(
                team=team, submitter=submitter, instruction=text, minhash=signature(trigrams(text))
            )
        vote_import = VoteImport.objects.create(
            arena=arena,
            digest=digest,
            file_name=path.name[:300],
            rows=len(parsed.y) + parsed.skipped,
            battles=len(parsed.y),
        )
        for i in tqdm(range(len(parsed.y)), desc="import", unit="battle", file=sys.stderr):
            agent_a = agents[parsed.agents[parsed.a[i]]]
            agent_b = agents[parsed.agents[parsed.b[i]]]
            outcome = _outcome(float(parsed.y[i]), winners[i])
            judge = judge_users[judges[i]]
            # Created open and decided at once through the one door; the row is new in
            # this transaction, so no one else can hold it.
            battle = Battle.objects.create(
                arena=arena,
                team=team,
                task=task_rows[tasks[i]],
                agent_a=agent_a,
                agent_b=agent_b,
                status=Battle.Status.JUDGING,
                submitted_at=now,
            )
            vote = Vote.objects.create(
                judge=judge,
                battle=battle,
                choice=outcome,
                served_at=now,
                voted_at=now,
                final_at=now,
                admissible=True,
            )
            ImportedBattle.objects.create(vote_import=vote_import, battle=battle, row=i + 1)
            battle_decide(
                battle=battle,
                outcome=outcome,
                weight=float(parsed.w[i]),
                source=Battle.DecisionSource.IMPORT,
                votes=[vote],
                cluster_judge_id=judge.pk,
                push=False,
            )
        return vote_import


def _agents_by_name(arena: Arena, names: list[str], *, create: bool) -> dict[str, Agent]:
    roster = list(Agent.objects.filter(arena=arena))
    by_slug = {agent.slug: agent for agent in roster}
    by_name = {agent.display_name: agent for agent in roster}
    found = {name: by_slug.get(name) or by_name.get(name) for name in names}
    unknown = [name for name, agent in found.items() if agent is None]
    if unknown and not create:
        raise CommandError(
            f"{len(unknown)} agent(s) in the file are not in the {arena.slug} arena: "
            f"{', '.join(sorted(unknown))}. Enter them in the roster (slug or display name "
            "must match), or pass --create-agents to create retired placeholders."
        )
    for name in unknown:
        base = slugify(name)[:56] or "agent"
        slug, n = base, 1
        while Agent.objects.filter(arena=arena, slug=slug).exists():
            n += 1
            slug = f"{base}-{n}"
        found[name] = Agent.objects.create(
            arena=arena,
            slug=slug,
            display_name=name[:100],
            kind=Agent.Kind.BUILTIN,
            builtin_policy="idle",
            retired_at=timezone.now(),
        )
    return found


def _import_team() -> Team:
    """The team that owns imported tasks. It has no members, so no one sees the task
    texts; a team of that name with members is refused rather than handed them."""
    team, _ = Team.objects.get_or_create(name=IMPORT_TEAM)
    if team.memberships.exists():
        raise CommandError(
            f"a team named {IMPORT_TEAM!r} has members; imported tasks must belong to no "
            "one. Rename that team and run the import again."
        )
    return team


def _user(username: str):
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user
