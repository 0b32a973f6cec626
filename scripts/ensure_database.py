"""Creates the PostgreSQL database DATABASE_URL names when it is missing (a fresh server
has only "postgres"; connections open on it before pytest-django makes its test
databases). Exits non-zero with the reason when the server cannot be reached."""

import os
import sys

import psycopg
from psycopg import sql

PREFIX = sys.argv[1] if len(sys.argv) > 1 else "database"


def main() -> None:
    base, name = os.environ["DATABASE_URL"].rsplit("/", 1)
    try:
        with psycopg.connect(base + "/postgres", connect_timeout=3, autocommit=True) as pg:
            found = pg.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if found.fetchone() is None:
                pg.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                print(f"{PREFIX}: created the database {name}")
    except psycopg.Error as exc:
        sys.exit(f"{PREFIX}: PostgreSQL is not reachable at {os.environ['DATABASE_URL']}: {exc}")


if __name__ == "__main__":
    main()
