#!/usr/bin/env bash
# `make deploy`: deploy/compose.yaml up on the Docker engine of $DOCKER_HOST (a unix
# socket; the default /var/run/docker.sock otherwise), in one command:
#   1. the app image and the sandboxes' desktop image, built offline on that engine
#      (scripts/app_image.sh, scripts/image.sh; each only when its inputs changed);
#   2. deploy/arena.env, the secrets, made once when it does not exist (never replaced:
#      the volumes hold its passwords);
#   3. docker-compose up -d, project $COMPOSE_PROJECT_NAME (arena).
# `make deploy-down` stops and removes the containers and keeps the volumes.
# docs/deployment.md, "Compose".
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'deploy: %s\n' "$*" >&2; }

export DOCKER_HOST="${DOCKER_HOST:-unix:///var/run/docker.sock}"
case "$DOCKER_HOST" in
    unix://*) export ARENA_DOCKER_SOCKET="${ARENA_DOCKER_SOCKET:-${DOCKER_HOST#unix://}}" ;;
    *) say "DOCKER_HOST=$DOCKER_HOST: the battle host mounts a unix socket; for a remote engine use an override file (docs/deployment.md)"; exit 2 ;;
esac
docker version >/dev/null 2>&1 || { say "no Docker engine answers at $DOCKER_HOST"; exit 1; }
command -v docker-compose >/dev/null 2>&1 || { say "docker-compose is missing (apt-get install docker-compose)"; exit 1; }
image="${ARENA_IMAGE:-agent-arena:latest}"
bash scripts/app_image.sh "$image"
bash scripts/image.sh "${ARENA_DOCKER_IMAGE:-agent-arena-desktop}"
secrets="${ARENA_ENV_FILE:-deploy/arena.env}"
if [ ! -s "$secrets" ]; then
    (umask 077 && docker run --rm --network none "$image" secrets >"$secrets")
    say "made $secrets: keep it (its passwords are in the volumes from the first start)"
fi
export ARENA_ENV_FILE="$(cd "$(dirname "$secrets")" && pwd)/$(basename "$secrets")"
export ARENA_IMAGE="$image"
docker-compose -f deploy/compose.yaml -p "${COMPOSE_PROJECT_NAME:-arena}" up -d
say "up: http://${ARENA_HTTP_BIND:-127.0.0.1}:${ARENA_HTTP_PORT:-8080}/ (an administrator: docker-compose -f deploy/compose.yaml -p ${COMPOSE_PROJECT_NAME:-arena} run --rm migrate manage createsuperuser)"
