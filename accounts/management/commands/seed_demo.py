"""Idempotently seeds a demo arena: team ``demo`` owned by ``demo``, judges
``judge1``–``judge3``, superuser ``admin``, current consent terms accepted by all of
them, and the built-in roster.

Passwords come from ARENA_DEMO_PASSWORD / ARENA_ADMIN_PASSWORD; otherwise each new
account gets a random one, printed once and written to ``<data dir>/demo-logins.txt``
(mode 0600) so ``make run`` can show it again on this machine."""

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

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

DEFAULT_TERMS = """By submitting a task you agree that the task, both agents' trajectories,
the judges' votes and the resulting ratings may be published by the arena.
Do not submit personal data or secrets. You may ask an admin to withdraw a task
before it is published."""

JUDGES = ("judge1", "judge2", "judge3")


class Command(BaseCommand):
    help = "Seed the demo team, judges, admin, consent terms and built-in roster (idempotent)."

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
        self.stdout.write(self.style.SUCCESS("demo data is in place"))

    @transaction.atomic
    def seed(self) -> dict[str, str]:
        User = get_user_model()
        created: dict[str, str] = {}

        def ensure_user(username: str, env: str, **flags) -> object:
            user = User.objects.filter(username=username).first()
            if user is None:
                password = os.environ.get(env) or secrets.token_urlsafe(12)
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


def _read_logins(path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    pairs = []
    for line in path.read_text().splitlines():
        if " " in line:
            user, password = line.split(" ", 1)
            pairs.append((user, password))
    return pairs
