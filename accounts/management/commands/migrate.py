"""``manage.py migrate``, safe to run from several processes at once: on PostgreSQL each
run first takes a session advisory lock, so a second one waits for the first and then
finds nothing left to apply. Without it, two releases' migration jobs (or two ``make
run`` starting together) on a fresh database both create the same tables and rows, and
one fails with an IntegrityError halfway through (docs/deployment.md).

It lives in the first of the project's apps so that it overrides Django's own command
(Django takes a command from the earliest installed app that has it)."""

from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import connections

# The lock's key: any 64-bit number no other advisory lock of the arena uses.
MIGRATE_LOCK_KEY = 0x4172656E614D6967  # "ArenaMig"


class Command(DjangoMigrate):
    help = DjangoMigrate.help + " Runs at once wait for each other (a PostgreSQL advisory lock)."

    def handle(self, *args, **options):
        connection = connections[options["database"]]
        if connection.vendor != "postgresql":
            return super().handle(*args, **options)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [MIGRATE_LOCK_KEY])
        try:
            return super().handle(*args, **options)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [MIGRATE_LOCK_KEY])
