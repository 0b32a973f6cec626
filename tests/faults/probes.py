"""Jobs the fault tests enqueue to see a worker work: each appends a line to a file."""

import time
from pathlib import Path


def touch(path: str, label: str) -> str:
    with Path(path).open("a") as out:
        out.write(f"{label} {time.time():.3f}\n")
    return label


def labels(path: Path) -> dict[str, float]:
    """Label → when its job ran, from the file ``touch`` appends to."""
    if not path.exists():
        return {}
    return {
        label: float(at)
        for label, at in (line.split() for line in path.read_text().splitlines() if line)
    }


def db_touch(label: str) -> str:
    """Records ``label`` in the database (idempotent: a retried job records it once)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS fault_probe (label text PRIMARY KEY,"
            " at timestamptz NOT NULL DEFAULT now())"
        )
        cursor.execute(
            "INSERT INTO fault_probe (label) VALUES (%s) ON CONFLICT DO NOTHING", [label]
        )
    return label
