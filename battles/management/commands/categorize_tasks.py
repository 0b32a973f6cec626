"""Fills the category of every task that has none (tasks from before categories, imports,
tournaments): the board each counts on. Safe to run any time; the refit job does the
same for the battles it rates."""

from django.core.management.base import BaseCommand, CommandError

from battles.services.categories import task_categories_backfill


class Command(BaseCommand):
    help = "Give every task without a category the one its instruction reads as."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--limit", type=int, default=None, help="at most this many tasks")

    def handle(self, *args, limit: int | None = None, **options) -> None:
        if limit is not None and limit < 1:
            raise CommandError("--limit must be a positive number of tasks.")
        done = task_categories_backfill(limit=limit)
        self.stdout.write(f"categorised {done} task{'s' if done != 1 else ''}")
