"""Two ``manage.py migrate`` at once on a fresh database (two releases' migration jobs,
two ``make run`` starting together) both succeed: the project's migrate waits on a
PostgreSQL advisory lock (accounts/management/commands/migrate.py). Without it one of
them failed halfway with an IntegrityError."""

import os
import secrets
import subprocess

import psycopg
from django.conf import settings

from tests.servers import PYTHON, ROOT


def test_two_migrations_at_once_on_a_fresh_database_both_succeed(tmp_path):
    db = settings.DATABASES["default"]
    server = {"host": db["HOST"], "port": db["PORT"], "user": db["USER"]}
    name = f"arena_migrate_{secrets.token_hex(4)}"
    with psycopg.connect(**server, dbname="postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", ARENA_DATA_DIR=str(tmp_path))
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
        argv = [PYTHON, "manage.py", "migrate", "--noinput", "-v", "0"]
        runs = [
            subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        errors = [run.communicate(timeout=600)[1] for run in runs]
        assert [run.returncode for run in runs] == [0, 0], [e[-3000:] for e in errors]
        check = [PYTHON, "manage.py", "migrate", "--check"]
        assert subprocess.run(check, cwd=ROOT, env=env, timeout=120).returncode == 0
    finally:
        with psycopg.connect(**server, dbname="postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
