"""A bare ``pytest`` (not through scripts/test.sh) refuses to run, before it touches any
database or Redis: it would have run on SQLite and emptied Redis database 0."""

import os
import secrets
import subprocess

import redis
from django.conf import settings

from tests.conftest import BARE_PYTEST
from tests.servers import PYTHON, ROOT


def test_a_bare_pytest_refuses_and_empties_nothing(tmp_path):
    # A Redis database no test of this run uses (the runner's are N and up), holding a
    # key the refused run must leave alone; the child is pointed at it, as a developer's
    # shell might be.
    url = settings.REDIS_URL.rsplit("/", 1)[0] + "/13"
    spare = redis.Redis.from_url(url)
    key = f"arena-bare-pytest-{secrets.token_hex(4)}"
    spare.set(key, "kept", ex=120)
    env = {k: v for k, v in os.environ.items() if k not in ("ARENA_TEST_SUITE", "DATABASE_URL")}
    env.update(REDIS_URL=url, ARENA_DATA_DIR=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    argv = [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "tests/arena_site/test_config.py"]
    try:
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-2000:]
        assert BARE_PYTEST in done.stdout + done.stderr
        assert spare.get(key) == b"kept"
        assert not (tmp_path / "arena.sqlite3").exists()  # no database was made
    finally:
        spare.delete(key)
