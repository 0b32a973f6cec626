#!/usr/bin/env bash
# The whole suite against real PostgreSQL and Redis. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

export DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/arena}"
# A Redis database of its own, so tests never touch a running arena's queues.
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/14}"
export ARENA_CHANNEL_PREFIX=arena-test ARENA_CACHE_PREFIX=arena-test
export ARENA_DATA_DIR="${ARENA_DATA_DIR:-$PWD/var/test}"
mkdir -p "$ARENA_DATA_DIR/staticfiles"  # WhiteNoise warns on every request without it
export PYTHONDONTWRITEBYTECODE=1
# A fresh key per run: the suite never signs with a key that exists anywhere else.
ARENA_SECRET_KEY="$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))')"
export ARENA_SECRET_KEY
# Small dense solves: one BLAS thread is faster than a pool on a busy machine.
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# No DNS from the suite: sandbox egress resolves nothing, "public" hosts are simulated.
export ARENA_EGRESS_RESOLVE=false
# tests/conftest.py refuses to run without it: a bare `pytest` would use SQLite and Redis
# database 0, and the suite empties its Redis databases.
export ARENA_TEST_SUITE=scripts/test.sh
# pytest processes (pytest-xdist): many tests wait on sandboxes, browsers and servers, so
# two overlap well even on two cores. 0 or 1: the suite runs in this one process. Worker
# i gets Redis database N+i (N from TEST_REDIS_URL), its own data dir, prefixes, test
# database and sandbox uids (tests/workers.py). worksteal: tests go one by one, and an
# idle worker takes half of the other's queue, so the minutes-long tests at the end do
# not leave one worker idle (measured: within ~2 % of the ideal split; per file: 6 % worse).
export ARENA_TEST_WORKERS="${ARENA_TEST_WORKERS:-2}"
xdist=()
if [ "$ARENA_TEST_WORKERS" -gt 1 ]; then
    xdist=(-n "$ARENA_TEST_WORKERS" --dist worksteal)
fi

py=.venv/bin/python
$py scripts/ensure_database.py test
$py - <<'PY'
import os, sys
import redis
from tests.workers import redis_url_for
for index in range(max(1, int(os.environ["ARENA_TEST_WORKERS"]))):
    url = redis_url_for(os.environ["REDIS_URL"], index)
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except Exception as exc:
        sys.exit(f"test: Redis is not reachable at {url} (worker {index}): {exc}")
PY

# ARENA_TEST_SKIP_CHECKS=1: only pytest (one test file while the tree is mid-edit);
# make test and CI always run the checks
if [ "${ARENA_TEST_SKIP_CHECKS:-0}" != 1 ]; then
echo "== lint"
$py -m ruff check --quiet .
echo "== import layers (pyproject.toml [tool.importlinter])"
.venv/bin/lint-imports --no-cache >/dev/null || .venv/bin/lint-imports --no-cache
echo "== migrations are complete"
# (on a scratch SQLite: the check needs no server, and no "arena" database must exist)
DATABASE_URL= ARENA_DATA_DIR="$(mktemp -d)" $py manage.py makemigrations --check --dry-run >/dev/null
echo "== OpenAPI schema validates"
$py manage.py spectacular --validate --fail-on-warn --file /dev/null
# The Docker backend's images, built before pytest rather than inside the first Docker
# test's time limit (a fresh clone builds them: about a minute on a quiet machine, over
# five beside other work). The same code as the tests' engine fixture: it starts the
# private daemon, builds what changed, and stops the daemon again if it started it.
if [ "$(id -u)" = 0 ] && PATH="$PATH:/usr/sbin:/sbin" command -v dockerd >/dev/null; then
    echo "== Docker images (tests/docker_engine.py)"
    $py -c 'from tests.docker_engine import engine_session
with engine_session(): pass'
fi
fi
echo "== pytest"
set +e
$py -m pytest -p no:cacheprovider "${xdist[@]}" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "test: pytest collected no tests" >&2
fi
exit "$rc"
