"""DATABASE_URL: any scheme the URL parser knows works; an unknown one stops start-up
with a message. (A PostgreSQL-only connection option once broke a sqlite:/// URL.)"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def manage(args: list[str], database_url: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url, "ARENA_DATA_DIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# A whole migrate and serve on SQLite: `make soak`; the scheme check below stays.
@pytest.mark.soak
def test_a_sqlite_url_migrates_and_serves(tmp_path):
    url = f"sqlite:///{tmp_path / 'arena.sqlite3'}"
    done = manage(["migrate", "--noinput", "-v", "0"], url, tmp_path)
    assert done.returncode == 0, done.stderr
    shown = manage(["showmigrations", "judging"], url, tmp_path)
    assert "[X] 0004_vote_final_after_cast" in shown.stdout, shown.stdout + shown.stderr


def test_an_unknown_scheme_stops_start_up_with_a_message(tmp_path):
    done = manage(["check"], "nosuchdb://host/db", tmp_path)
    assert done.returncode != 0
    assert "DATABASE_URL is not a database URL Django knows" in done.stderr
