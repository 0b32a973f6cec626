#!/usr/bin/env bash
# `make bench`: every benchmark of tests/bench/ (each prints JSON), against the same
# services as the tests (PostgreSQL, a Redis database of its own, no DNS from sandboxes).
set -euo pipefail
cd "$(dirname "$0")/.."

export DATABASE_URL="${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/arena}"
export REDIS_URL="${TEST_REDIS_URL:-redis://127.0.0.1:6379/14}"
export ARENA_CHANNEL_PREFIX=arena-bench ARENA_CACHE_PREFIX=arena-bench
export ARENA_EGRESS_RESOLVE=false
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
if [ -z "${ARENA_SECRET_KEY:-}" ]; then
    ARENA_SECRET_KEY="$(.venv/bin/python -c 'import secrets; print(secrets.token_urlsafe(50))')"
    export ARENA_SECRET_KEY
fi
.venv/bin/python scripts/ensure_database.py bench
# The soak's size and variants (tests/bench/bench_soak.py: 1,000 cycles, 100 pairs at
# once; e.g. BENCH_SOAK_ARGS="--quick" or "--docker-cycles 100").
read -ra soak_args <<< "${BENCH_SOAK_ARGS:-}"
for f in tests/bench/bench_*.py; do
    echo "== $f" >&2
    if [ "$f" = tests/bench/bench_soak.py ]; then
        .venv/bin/python "$f" "${soak_args[@]}"
    else
        .venv/bin/python "$f"
    fi
done
