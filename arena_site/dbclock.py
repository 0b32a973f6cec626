"""The database's clock, for every liveness decision (docs/deployment.md, "A fleet that
checks itself"): a heartbeat is written as the database's ``now()`` and read against
it, so a host whose own clock runs late or early neither looks dead nor keeps a dead
host alive. Other timestamps (when a vote was cast, when a run ended) stay the writing
process's."""

from datetime import datetime, timedelta

from django.db import connection
from django.db.models import DateTimeField, ExpressionWrapper, Value
from django.db.models.functions import Now
from django.utils import timezone


def db_now() -> datetime:
    """The database's time now (its transaction's start, inside one). SQLite (``make
    run`` without PostgreSQL) is a file of one machine: its clock is this process's."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT CURRENT_TIMESTAMP")
        return cursor.fetchone()[0]


def db_ago(seconds: float) -> ExpressionWrapper:
    """The database's time ``seconds`` ago, as an expression for a filter."""
    return ExpressionWrapper(
        Now() - Value(timedelta(seconds=seconds)), output_field=DateTimeField()
    )
