"""Idempotently seeds a demo arena: team ``demo`` owned by ``demo``, judges
``judge1``–``judge3``, superuser ``admin``, current consent terms accepted by all of
them, the built-in roster, and (once, unless ``--no-battles``) a short judged history:
``demo`` submits a handful of tasks, their battles run in real sandboxes, and the three
judges vote on them through the real services, so the leaderboard, the judge page and
the judging-quality page (agreement on redundancy battles, exclusion counts) show real
figures.

Passwords come from ARENA_DEMO_PASSWORD / ARENA_ADMIN_PASSWORD (held to the site's
password rules: at least 12 characters); otherwise each new account gets a random one,
printed once and written to ``<data dir>/demo-logins.txt`` (mode 0600) so ``make run``
can show it again on this machine."""

import os
import secrets
from contextlib import contextmanager
from datetime import timedelta
from unittest import mock

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from accounts.models import Membership, Team
from accounts.services import (
    consent_accept,
    consent_terms_current,
    consent_terms_publish,
    team_create,
)
from agents.models import Arena
from agents.services import roster_install_builtins
from judging.services import judge_profile
from judging.services.demo_board import demo_board_seed
from sandboxes.demoweb import DEMO_TASKS as WEB_TASKS

DEFAULT_TERMS = """By submitting a task you agree that the task, both agents' trajectories,
the judges' votes and the resulting ratings may be published by the arena.
Do not submit personal data or secrets. You may ask an admin to withdraw a task
before it is published."""

JUDGES = ("judge1", "judge2", "judge3")


class Command(BaseCommand):
    help = (
        "Seed the demo team, judges, admin, consent terms, built-in roster and a judged "
        "battle history (idempotent)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--no-battles",
            action="store_true",
            help="Seed people and roster only; run and judge no demo battles.",
        )

    def handle(self, *args, **options) -> None:
        created = self.seed()
        logins = settings.DATA_DIR / "demo-logins.txt"
        if created:
            logins.parent.mkdir(parents=True, exist_ok=True)
            known = dict(_read_logins(logins))
            known.update(created)
            fd = os.open(logins, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                handle.writelines(f"{user} {password}\n" for user, password in known.items())
            for user, password in created.items():
                self.stdout.write(f"created {user} with password {password}")
        # The demo board (simulated votes, ARENA_DEMO_BOARD), in seconds, before the
        # real demo battles, which take minutes.
        for line in demo_board_seed():
            self.stdout.write(line)
        if not options["no_battles"]:
            for line in demo_history_seed():
                self.stdout.write(line)
        self.stdout.write(self.style.SUCCESS("demo data is in place"))

    @transaction.atomic
    def seed(self) -> dict[str, str]:
        User = get_user_model()
        created: dict[str, str] = {}

        def ensure_user(username: str, env: str, **flags) -> object:
            user = User.objects.filter(username=username).first()
            if user is None:
                password = os.environ.get(env) or secrets.token_urlsafe(12)
                _password_check(env, password, User(username=username))
                user = User.objects.create_user(username=username, password=password, **flags)
                if not os.environ.get(env):
                    created[username] = password
            return user

        terms = consent_terms_current() or consent_terms_publish(text=DEFAULT_TERMS)
        demo = ensure_user("demo", "ARENA_DEMO_PASSWORD")
        if not Team.objects.filter(name="demo").exists():
            team_create(name="demo", owner=demo)
        admin = ensure_user("admin", "ARENA_ADMIN_PASSWORD", is_staff=True, is_superuser=True)
        people = [demo, admin]
        for name in JUDGES:
            judge = ensure_user(name, "ARENA_DEMO_PASSWORD")
            if not Membership.objects.filter(user=judge).exists():
                team_create(name=f"{name}-team", owner=judge)
            judge_profile(judge)
            people.append(judge)
        if not Membership.objects.filter(user=admin).exists():
            team_create(name="arena-admins", owner=admin)
        for person in people:
            consent_accept(user=person, terms=terms)
        roster_install_builtins(arena=Arena.objects.public())
        return created


def _password_check(variable: str, password: str, user) -> None:
    """The site's password rules (AUTH_PASSWORD_VALIDATORS: 12 characters at least) hold
    for a demo password too; a refused ``variable`` stops the command, naming it."""
    try:
        validate_password(password, user)
    except ValidationError as problems:
        raise CommandError(f"{variable} is refused: {' '.join(problems.messages)}") from None


def _read_logins(path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    pairs = []
    for line in path.read_text().splitlines():
        if " " in line:
            user, password = line.split(" ", 1)
            pairs.append((user, password))
    return pairs


# --- the judged demo history ------------------------------------------------------------

# (instruction, redundancy target). Three are drawn for three judges (agreement and κ
# on the quality page); the rest for one.
DEMO_TASKS = [
    ("Create a file named groceries.txt containing milk, eggs and bread", 3),
    ("What is 17 * 23 + 4?", 3),
    ("List the files in the workspace", 3),
    ("Compute (12 + 30) / 7", 1),
    ("Create a file named hello.txt containing hello arena", 1),
]
# Rule 7 (no admissible vote): its only judge abstains.
ABSTAINED_TASK = "Calculate 2 * 2 * 2 * 2 * 2"
# Rule 5 (ended by the submitter): the submitter ends side B before it takes a step.
ENDED_EARLY_TASK = "Write a file named draft.txt containing a first draft of the plan"
# Rule 1 (a name in judge-visible text) when the rule-following agent is drawn: it
# writes the names into the file and its shell command.
NAMING_TASK = "Create a file named credits.txt containing Rulebook and Surveyor were here"
# The demo web's tasks (sandboxes.demoweb, docs/demo-web.md): both sides browse
# http://demo.arena.test/. The first ones are judged with the history (one judge each),
# the rest left open with OPEN_TASKS. Submitted with their start URL (both sides open on
# the page: a new judge's first battles are ones with something to see, docs/method.md)
# and each with its known category.
WEB_JUDGED = 4
WEB_CATEGORIES = {task["instruction"]: task["category"] for task in WEB_TASKS}
WEB_START_URLS = {task["instruction"]: task["start_url"] for task in WEB_TASKS}
JUDGED_TASKS = [*DEMO_TASKS, *((task["instruction"], 1) for task in WEB_TASKS[:WEB_JUDGED])]
# How long the demo judges read each battle: their serve is stamped this long before
# the vote (see _served_earlier).
DEMO_READ_S = 45
# Where demo judges part from the common verdict: (judge, redundancy task index) → choice.
DISSENT = {("judge3", 1): "flip", ("judge2", 2): "tie"}
# Submitted after the demo judges are done: judge1 rushes a vote on the first; the
# others are left open for whoever judges next.
OPEN_TASKS = [
    "Create a file named todo.txt containing call the plumber",
    "What is (365 - 52) * 24?",
    "Create a file named packing.txt containing passport, charger, socks",
    *(task["instruction"] for task in WEB_TASKS[WEB_JUDGED:]),
]


def demo_history_seed() -> list[str]:
    """Runs and judges the demo battles once (a demo team with any task is left alone).
    Returns lines to print."""
    from django.test import override_settings

    User = get_user_model()
    demo = User.objects.get(username="demo")
    if demo.tasks.exists():
        return ["demo battles: already seeded"]
    # The demo judges confirm at once (no undo window to wait out).
    with override_settings(ARENA=settings.ARENA.replace(vote_undo_window_s=0)):
        return _demo_history(demo)


def _demo_history(demo) -> list[str]:
    from battles.models import Battle
    from judging.services import judge_next, vote_cast

    User = get_user_model()
    excluded = [ABSTAINED_TASK, ENDED_EARLY_TASK, NAMING_TASK]
    battles = _demo_battles_run(demo, JUDGED_TASKS, excluded)
    judges = [User.objects.get(username=name) for name in JUDGES]
    if any(b.status != Battle.Status.JUDGING and not b.exclusion_reason for b in battles):
        failed = [b.pk for b in battles if b.status == Battle.Status.FAILED]
        return [f"demo battles: some did not finish (failed: {failed}); no votes seeded"]
    votes = _demo_votes_cast(battles, judges)
    battles += _demo_battles_run(demo, [(task, 1) for task in OPEN_TASKS], [])
    # One vote without reading: stored as too fast; it does not count, and the battle
    # stays open for other judges (one account cannot remove it from the rating).
    rushed = judge_next(judge=judges[0])
    if rushed is not None and rushed.pk in {b.pk for b in battles}:
        vote_cast(judge=judges[0], battle_id=rushed.pk, choice="A")
        votes += 1
    statuses = sorted({f"{b.status}{'/' + b.exclusion_reason if b.exclusion_reason else ''}"
                       for b in Battle.objects.filter(pk__in=[b.pk for b in battles])})  # fmt: skip
    return [f"demo battles: {len(battles)} run, {votes} votes cast ({', '.join(statuses)})"]


def _demo_battles_run(demo, tasks: list[tuple[str, int]], singles: list[str]) -> list:
    """Submits ``tasks`` (instruction, redundancy target), then ``singles`` (target 1,
    the second of them with side B ended at once), through admission, and runs their
    battles in this process (real sandboxes, a few at a time) in submission order."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection
    from django.test import override_settings

    from battles.models import Battle, Task
    from battles.services import battle_end_side, battle_run, task_submit
    from judging.services import battle_screen

    rng = random.Random(2026)  # noqa: S311 - a reproducible demo, not a secret
    battles = []
    for instruction, target in [*tasks, *((single, 1) for single in singles)]:
        # The redundancy draw is random (SPEC §5.2); the demo asks for its sample.
        fraction = 1.0 if target > 1 else 0.0
        with override_settings(ARENA=settings.ARENA.replace(redundancy_fraction=fraction)):
            start_url = WEB_START_URLS.get(instruction, "")
            battles.append(
                task_submit(user=demo, instruction=instruction, start_url=start_url, rng=rng)
            )
        if instruction in WEB_CATEGORIES:
            Task.objects.filter(pk=battles[-1].task_id).update(category=WEB_CATEGORIES[instruction])
    if len(singles) >= 2:
        battle_end_side(user=demo, battle_id=battles[len(tasks) + 1].pk, side="B")

    def run(battle_id: int) -> None:
        try:
            battle_run(battle_id=battle_id)
            # `make run` seeds these while its workers run (scripts/run_arena.py): a
            # battle worker may have claimed this battle first; it is waited for
            _battle_wait(battle_id)
            battle_screen(battle_id=battle_id)  # here, not on a worker: judging follows
        finally:
            connection.close()

    # Run in submission order, a few at once: ended_at then orders them for judge_next.
    slots = max(1, min(3, settings.ARENA.battle_slots))
    for start in range(0, len(battles), slots):
        with ThreadPoolExecutor(max_workers=slots) as pool:
            list(pool.map(run, [b.pk for b in battles[start : start + slots]]))
    return list(Battle.objects.filter(pk__in=[b.pk for b in battles]).order_by("pk"))


# How long a battle a worker claimed may take before the seeding gives up on it.
BATTLE_WAIT_S = 900


def _battle_wait(battle_id: int) -> None:
    """Until the battle has left the queue and its lanes (it may be a worker's)."""
    import time

    from battles.models import Battle

    deadline = time.monotonic() + BATTLE_WAIT_S
    busy = (Battle.Status.QUEUED, Battle.Status.RUNNING)
    while Battle.objects.filter(pk=battle_id, status__in=busy).exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.5)


# How well the built-in agents do simple tasks (agents/policies.py): the demo judges'
# common verdict follows it; an agent not listed ranks with the weakest.
COMPETENCE = {"rulebook": 3, "surveyor": 2, "idle": 1}


def _verdict(battle) -> str:
    """The common verdict on a demo battle: the more competent side wins, equals tie."""
    a, b = (COMPETENCE.get(agent.slug, 0) for agent in (battle.agent_a, battle.agent_b))
    return "tie" if a == b else ("A" if a > b else "B")


@contextmanager
def _served_earlier(seconds: float):
    """Stamps what is written inside as happening ``seconds`` ago: the demo judges
    "read" each battle without the seeding waiting for it. The services read the clock
    through ``django.utils.timezone.now``."""
    moment = timezone.now() - timedelta(seconds=seconds)
    with mock.patch.object(timezone, "now", return_value=moment):
        yield


def _demo_votes_cast(battles: list, judges: list) -> int:
    """Each judge asks for the next battle (judge_next) and votes on it (vote_cast),
    until nothing is left to judge; every rule is the services' own."""
    from battles.models import Battle
    from judging.services import judge_next, vote_cast

    redundant = [b.pk for b in battles if b.redundancy_target > 1]
    abstained = battles[len(JUDGED_TASKS)].pk
    seeded = {b.pk for b in battles}
    # A demo judge never votes on a battle the demo did not submit: `make run` seeds
    # while its pages are open, and a newcomer's own battle may be served first. That
    # judge then stops (it holds the newcomer's battle, served to it first again).
    done: set[int] = set()
    votes = 0
    for _ in range(len(battles) * len(judges)):
        progressed = False
        for judge in judges:
            if judge.pk in done:
                continue
            with _served_earlier(DEMO_READ_S):
                battle = judge_next(judge=judge)
            if battle is None:
                continue
            if battle.pk not in seeded:
                done.add(judge.pk)
                continue
            battle = Battle.objects.select_related("agent_a", "agent_b").get(pk=battle.pk)
            choice = _verdict(battle)
            if battle.pk == abstained:
                choice = "abstain"
            elif battle.pk in redundant:
                dissent = DISSENT.get((judge.username, redundant.index(battle.pk)))
                if dissent == "flip":
                    choice = {"A": "B", "B": "A"}.get(choice, "A")
                elif dissent:
                    choice = dissent
            vote_cast(judge=judge, battle_id=battle.pk, choice=choice)
            votes += 1
            progressed = True
        if not progressed:
            break
    return votes
