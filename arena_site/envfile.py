"""``python -m arena_site.envfile`` (the app image's ``arena secrets``): prints a new
secrets file for deploy/compose.yaml, every secret fresh from ``secrets`` and every URL
made from them, so nothing has to be typed twice. Save it as ``deploy/arena.env``
(0600, outside git) once: the passwords are written into the volumes on the first start
and the keys sign sessions and encrypt the teams' provider keys, so a new file for an
existing stack locks it out of its own data (rotation: docs/operations.md)."""

import datetime
import secrets
import sys

from cryptography.fernet import Fernet


def env_file(now: datetime.datetime | None = None) -> str:
    now = now or datetime.datetime.now(datetime.UTC)
    db_password = secrets.token_urlsafe(24)
    redis_password = secrets.token_urlsafe(24)
    values = {
        "ARENA_SECRET_KEY": secrets.token_urlsafe(50),
        "ARENA_KEY_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        # PostgreSQL's superuser (the postgres service only) and the arena's own role
        "POSTGRES_PASSWORD": secrets.token_urlsafe(24),
        "ARENA_DB_PASSWORD": db_password,
        "DATABASE_URL": f"postgres://arena:{db_password}@postgres:5432/arena",
        "REDIS_PASSWORD": redis_password,
        "REDIS_URL": f"redis://:{redis_password}@redis:6379/0",
        "ARENA_MEDIA_S3_ACCESS_KEY_ID": "arena-" + secrets.token_hex(6),
        "ARENA_MEDIA_S3_SECRET_ACCESS_KEY": secrets.token_urlsafe(30),
        "ARENA_METRICS_TOKEN": secrets.token_urlsafe(30),
    }
    head = [
        f"# deploy/compose.yaml's secrets, made by `arena secrets` on {now:%Y-%m-%d %H:%M} UTC.",
        "# Keep it 0600 and out of git; every container of the stack reads it.",
    ]
    return "\n".join([*head, *(f"{name}={value}" for name, value in values.items())]) + "\n"


if __name__ == "__main__":
    sys.stdout.write(env_file())
