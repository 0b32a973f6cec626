"""The demo board (docs/leaderboard.md "The demo board"): an arena of simulated
judgments between the built-in agents, so that a fresh arena's leaderboard shows ranked
ratings with intervals within its first minute, clearly labelled as demo data.

Built like an import of historical judgments (``manage.py import_votes``), never by a
shortcut: the built-ins entered in an arena of their own (``Arena.demo``), tasks of a
team with no members, one battle per judgment opened for judging with one admissible
vote by a simulated judge (an account that cannot log in), each decided through the one
door (``DecisionBatch``, source "import": the streaming ratings move as they would), then
the arena's real refit and category boards. Only the judgments are simulated
(``ratings.demo_votes``: a fixed-seed Bradley-Terry draw). Nothing is ever matched,
served or exported from that arena, and its rows count in no real arena's figures."""

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from agents.models import DEMO_ARENA_SLUG, Arena
from agents.services import roster_install_builtins
from battles.models import Battle, Task
from judging.models import Vote
from judging.services.decisions import DecisionBatch
from ratings.category_boards import category_boards_refresh
from ratings.demo_votes import DEMO_JUDGES, demo_judgments
from ratings.refit import arena_refit

logger = logging.getLogger(__name__)

DEMO_ARENA_NAME = "Demo arena (simulated votes)"
# The owner of the demo tasks: no members, so no one's task list shows them.
DEMO_TEAM = "demo:simulated-judgments"
DEMO_SUBMITTER = "demo:submitter"
DEMO_JUDGE = "demo:judge-{}"
# The tasks the simulated battles are about (the kind the seeded demo submits); the
# refit gives each its category (ratings.category_boards), so category boards fill too.
DEMO_TASKS = (
    "Create a file named groceries.txt containing milk, eggs and bread",
    "What is 17 * 23 + 4?",
    "List the files in the workspace",
    "Open http://demo.arena.test/ and find when the library opens on Saturday",
    "Compute (12 + 30) / 7",
    "Find the cheapest kettle in the shop at http://demo.arena.test/",
    "Write a short poem about autumn into poem.txt",
    "Open http://demo.arena.test/ and note the title of the newest article",
)
# How far back the simulated battles are spread (their submission and judging times).
DEMO_SPAN = timedelta(days=14)


class DemoBoardRefused(Exception):
    """An arena named like the demo's exists and is real: it is never made a demo."""


def demo_board_seed() -> list[str]:
    """Builds the demo arena and its judged history once (an arena that already has
    battles is left as it is), then runs its refit and category boards (a no-op when
    nothing changed). Does nothing when ARENA_DEMO_BOARD is off. Returns lines to
    print; a real arena or account in the way (``DemoBoardRefused``) is named there and
    nothing is built. Precondition: not inside a transaction (the refit publishes after
    its commit)."""
    if not settings.ARENA.demo_board:
        return ["demo board: off (ARENA_DEMO_BOARD)"]
    started = time.perf_counter()
    try:
        arena, battles = demo_history_write()
    except DemoBoardRefused as exc:
        logger.warning("demo board not built: %s", exc)
        return [f"demo board: not built: {exc}"]
    written = time.perf_counter()
    result = arena_refit(arena_id=arena.pk)
    category_boards_refresh(arena_id=arena.pk)
    done = time.perf_counter()
    what = f"{battles} simulated battles written" if battles else "already in place"
    return [
        f"demo board: {what} ({written - started:.1f} s); refit of {result.battles} battles "
        f"and the category boards {done - written:.1f} s"
    ]


@transaction.atomic
def demo_history_write() -> tuple[Arena, int]:
    """The demo arena, its roster and (when it has no battle yet) its simulated, decided
    battles, in one transaction. Returns the arena and how many battles were written."""
    arena = Arena.objects.select_for_update().filter(slug=DEMO_ARENA_SLUG).first()
    if arena is None:
        arena = Arena.objects.create(slug=DEMO_ARENA_SLUG, name=DEMO_ARENA_NAME, demo=True)
    elif not arena.demo:
        raise DemoBoardRefused(
            f"an arena with the slug {DEMO_ARENA_SLUG!r} exists and holds real battles; "
            "the demo board is not built (set ARENA_DEMO_BOARD=false to stop trying)"
        )
    agents = roster_install_builtins(arena=arena)
    if Battle.objects.filter(arena=arena).exists():
        return arena, 0
    team = _demo_team()
    submitter = _account(DEMO_SUBMITTER)
    judges = [_account(DEMO_JUDGE.format(n + 1)) for n in range(DEMO_JUDGES)]
    tasks = Task.objects.bulk_create(
        Task(team=team, submitter=submitter, instruction=text) for text in DEMO_TASKS
    )
    judgments = demo_judgments([agent.slug for agent in agents])
    now = timezone.now()
    step = DEMO_SPAN / len(judgments)
    battles = Battle.objects.bulk_create(
        Battle(
            arena=arena,
            team=team,
            task=tasks[i % len(tasks)],
            agent_a=agents[j.a],
            agent_b=agents[j.b],
            status=Battle.Status.JUDGING,
            submitted_at=now - DEMO_SPAN + i * step,
            ended_at=now - DEMO_SPAN + i * step,
        )
        for i, j in enumerate(judgments)
    )
    votes = Vote.objects.bulk_create(
        Vote(
            judge=judges[j.judge],
            battle=battle,
            choice=j.outcome,
            served_at=battle.ended_at,
            voted_at=battle.ended_at + step / 2,
            final_at=battle.ended_at + step / 2,
            admissible=True,
        )
        for battle, j in zip(battles, judgments, strict=True)
    )
    # In judging order through the one door (the streaming Elo is sequential); written
    # together, the board pushed by the refit that follows.
    batch = DecisionBatch(push=False, now=now)
    for battle, vote in zip(battles, votes, strict=True):
        batch.decide(
            battle=battle,
            outcome=vote.choice,
            weight=1.0,
            source=Battle.DecisionSource.IMPORT,
            votes=[vote],
            live_votes=[vote],
        )
    batch.write()
    logger.info("demo board: %s simulated battles in arena %s", len(battles), arena.pk)
    return arena, len(battles)


def _demo_team() -> Team:
    team, _ = Team.objects.get_or_create(name=DEMO_TEAM)
    if team.memberships.exists():
        raise DemoBoardRefused(
            f"a team named {DEMO_TEAM!r} has members; the demo tasks must belong to no one"
        )
    return team


def _account(username: str):
    """An account that cannot log in (no usable password); a person's account of that
    name is refused, never given simulated votes."""
    User = get_user_model()
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    elif user.has_usable_password():
        raise DemoBoardRefused(
            f"an account named {username!r} can log in; the demo board's simulated "
            "judges must be accounts of their own"
        )
    return user
