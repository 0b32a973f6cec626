#!/usr/bin/env bash
# The docker backend's self-contained desktop image, built without a registry: a base
# made by mmdebstrap from the Debian mirror apt already uses here (sandboxes/docker/packages
# on bookworm's Essential set) and imported with `docker import`, then one layer with the
# arena's files (sandboxes/docker/Dockerfile: sandboxes/inside/ at /opt/arena/inside/,
# entry.py, the Chromium wrapper, Chromium's managed policies).
#
#   scripts/image.sh IMAGE    builds IMAGE on the engine at $DOCKER_HOST, only when the
#                             hash of its inputs (label arena.inputs) changed
#   scripts/image.sh --hash   prints that hash
#   scripts/image.sh --coding IMAGE DESKTOP_IMAGE
#                             builds the coding image IMAGE: DESKTOP_IMAGE and one layer
#                             with var/toolchain (scripts/toolchain.sh) at
#                             /opt/arena/toolchain, only when its inputs (label
#                             arena.inputs: the desktop's, the toolchain's stamps and
#                             wrappers) changed
#
# scripts/docker.sh image runs it on the private engine. It reaches no host but the
# Debian mirrors configured in apt. The base is reproducible: the same inputs and mirror
# content give the same tarball (SOURCE_DATE_EPOCH is pinned, below), and it is rebuilt
# only when its own inputs changed (label arena.base-inputs); the .debs it downloads stay
# in var/image/debs, so a rebuild downloads only what the mirror changed since.
set -euo pipefail
cd "$(dirname "$0")/.."
SELF="$PWD/scripts/image.sh"

# The contract between the image and sandboxes/docker_backend.py (entrypoint, paths,
# labels): the backend refuses an image whose version it does not support.
VERSION=1
STATE="$PWD/var/image"
BASE_REPO=agent-arena-base
TOOLCHAIN="$PWD/var/toolchain"
SUITE=bookworm
ARCH=$(dpkg --print-architecture)

say() { printf 'image.sh: %s\n' "$*" >&2; }
# sources, epoch, label: shared with scripts/app_image.sh
# shellcheck source=scripts/image_lib.sh
. scripts/image_lib.sh

packages() { grep -v '^#' sandboxes/docker/packages | grep -v '^$' | sort -u; }

base_hash() {
    { echo "arch $ARCH suite $SUITE epoch $(epoch)"; sources; packages
      sed -n '/^build_base()/,/^}/p' "$SELF"; sed -n '/^debian_tar()/,/^}/p' scripts/image_lib.sh
    } | sha256sum | cut -c1-16
}

# Everything the arena layer is made of, and the base under it.
inputs_hash() {
    {
        echo "version $VERSION base $(base_hash)"
        sha256sum sandboxes/docker/Dockerfile sandboxes/docker/entry.py sandboxes/docker/chromium-wrapper
        find sandboxes/inside -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 \
            | sort -z | xargs -0 sha256sum
        sed -n '/^build_layer()/,/^}/p' "$SELF"
    } | sha256sum | cut -c1-16
}

# The base image: bookworm's Essential set and sandboxes/docker/packages (without
# recommends, manuals or documentation but the copyrights), the image's own agent user
# (uid 1000, for running it by hand; the backend binds a passwd naming the slot's) and
# the mount points of the run's dirs. Not /fb: the engine makes it in the display's
# container only, so the agent's has none.
build_base() {
    local tag=$1 hash=$2 tar="$STATE/base.tar"
    local started=$SECONDS
    sources >"$STATE/sources.list"
    debian_tar essential "$SUITE" "$(packages | paste -sd,)" "$tar" "$STATE/debs" "$STATE/sources.list" \
        --customize-hook='echo "agent:x:1000:1000:agent:/home/agent:/bin/sh" >> "$1"/etc/passwd' \
        --customize-hook='echo "agent:x:1000:" >> "$1"/etc/group' \
        --customize-hook='mkdir -p "$1"/home/agent "$1"/home/display "$1"/work "$1"/run/arena' \
        --customize-hook='chown 1000:1000 "$1"/home/agent "$1"/work'
    say "base: mmdebstrap took $((SECONDS - started)) s, tarball $(du -m "$tar" | cut -f1) MB, sha256 $(sha256sum "$tar" | cut -c1-16)"
    # The image's configuration: the arena's layer adds files only (one build step, as
    # every step of the legacy builder copies the whole image under vfs).
    docker import \
        --change "LABEL arena.base-inputs=$hash" \
        --change 'ENV HOME=/home/agent LANG=C.UTF-8 PATH=/usr/bin:/bin' \
        --change 'USER 1000:1000' \
        --change 'WORKDIR /work' \
        --change 'ENTRYPOINT ["/usr/bin/python3", "-I", "/opt/arena/entry.py"]' \
        --change 'CMD ["{}"]' \
        "$tar" "$tag" >/dev/null
    rm -f "$tar"
}

# The arena's layer on the base (sandboxes/docker/Dockerfile): a tree of its files,
# root-owned and read-only, copied in at once. The backend passes the supervisor's JSON
# config as the container's command (the base's entrypoint runs entry.py with it).
build_layer() {
    local image=$1 base=$2 hash=$3 context log
    context=$(mktemp -d "$STATE/context.XXXXXX")
    local tree="$context/tree"
    install -d -m 0755 "$tree/opt/arena/pylib" "$tree/etc/chromium/policies/managed"
    install -d -m 0555 "$tree/opt/arena/inside"
    find sandboxes/inside -maxdepth 1 -type f ! -name '*.pyc' -exec install -m 0444 {} "$tree/opt/arena/inside/" \;
    install -m 0444 sandboxes/docker/entry.py "$tree/opt/arena/entry.py"
    install -m 0555 sandboxes/docker/chromium-wrapper "$tree/opt/arena/chromium"
    install -m 0444 sandboxes/inside/chromium-policies.json "$tree/etc/chromium/policies/managed/arena.json"
    # python-xlib where the supervisor looks for it: input as XTEST events.
    ln -s /usr/lib/python3/dist-packages/Xlib "$tree/opt/arena/pylib/Xlib"
    # The version of the image's contract with sandboxes/docker_backend.py (which refuses
    # others) and the hash of its inputs: in the Dockerfile's last step, not a step more.
    { cat sandboxes/docker/Dockerfile
      echo "LABEL arena.image-version=$VERSION arena.inputs=$hash"; } >"$context/Dockerfile"
    # The same mtimes whatever the checkout's: the layer's content depends on its inputs only.
    find "$context" -exec touch -h -d "@$(epoch)" {} +
    log="$context/build.log"
    DOCKER_BUILDKIT=0 docker build --no-cache \
        --build-arg "BASE=$base" \
        --tag "$image" "$context" >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
    rm -rf "$context"
}

# What the toolchain's builds run on: Python's version and the C library's.
RUNTIME_PY='import platform, sys; print("python %d.%d" % sys.version_info[:2], *platform.libc_ver())'

# The coding image's inputs: the desktop image under it (its own inputs label), the
# toolchain's stamps (the hashes of its locks and python), its wrappers and ruff.
coding_hash() {
    local desktop=$1
    {
        echo "version $VERSION desktop $(label "$desktop" arena.inputs)"
        cat "$TOOLCHAIN"/npm/.stamp "$TOOLCHAIN"/aider/.stamp "$TOOLCHAIN"/pylib/.stamp
        (cd "$TOOLCHAIN/bin" && sha256sum -- *)
        sed -n '/^stage_pycs()/,/^}/p;/^build_coding()/,/^}/p' "$SELF"
    } | sha256sum | cut -c1-16
}

# The toolchain's .pyc files (timestamp-checked) with the pinned mtime of their sources in
# their header, under $1: as installed, Python would find them stale and compile the
# sources again at each start (Aider's imports: about 3 s). Stale ones are left out.
stage_pycs() {
    python3 - "$TOOLCHAIN" "$1" "$(epoch)" <<'PY'
import os, struct, sys
src, dest, epoch = sys.argv[1], sys.argv[2], int(sys.argv[3])
for top, _dirs, files in os.walk(src):
    for name in files if os.path.basename(top) == "__pycache__" else ():
        path = os.path.join(top, name)
        source = os.path.join(os.path.dirname(top), name.split(".")[0] + ".py")
        with open(path, "rb") as f:
            data = f.read()
        try:
            stat = os.stat(source)
        except OSError:
            continue
        _magic, flags, mtime, size = struct.unpack("<4sIII", data[:16])
        if flags or (mtime, size) != (int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF):
            continue
        out = os.path.join(dest, os.path.relpath(path, src))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "wb") as f:
            f.write(data[:8] + struct.pack("<II", epoch, size) + data[16:])
PY
}

# The coding image: the desktop image and one layer with the toolchain at
# /opt/arena/toolchain (what the local backend binds from var/toolchain), root-owned and
# read-only, its dirs o+rx. The context is a tar streamed from var/toolchain itself (1.5
# GB: no copy on disk) and its staged .pyc files, with pinned mtimes, owners and modes
# and its members sorted.
build_coding() {
    local image=$1 desktop=$2 hash=$3 context log
    context=$(mktemp -d "$STATE/context.XXXXXX")
    printf '%s\n' "FROM $desktop" "COPY tree/ /" \
        "LABEL arena.image-version=$VERSION arena.inputs=$hash arena.toolchain=1" >"$context/Dockerfile"
    # /opt and /opt/arena in the tar too: their pinned mtimes, not the build's clock.
    mkdir -p "$context/tree/opt/arena" "$context/pyc"
    stage_pycs "$context/pyc"
    log="$context/build.log"
    tar -c --sort=name --mtime="@$(epoch)" --owner=0 --group=0 --numeric-owner \
        --mode='a-w,a+rX' --pax-option=delete=atime,delete=ctime \
        --anchored --exclude='./*.pyc' \
        -C "$context" Dockerfile tree pyc -C "$TOOLCHAIN" . \
        --transform='s,^\(\.\|pyc\)/,tree/opt/arena/toolchain/,;s,^\(\.\|pyc\)$,tree/opt/arena/toolchain,' \
        | DOCKER_BUILDKIT=0 docker build --no-cache --tag "$image" - >"$log" 2>&1 \
        || { cat "$log" >&2; exit 1; }
    rm -rf "$context"
}

if [ "${1:-}" = --coding ]; then
    [ $# -eq 3 ] || { echo "usage: scripts/image.sh --coding IMAGE DESKTOP_IMAGE" >&2; exit 2; }
    IMAGE=$2
    DESKTOP=$3
    for stamp in npm aider pylib; do
        [ -f "$TOOLCHAIN/$stamp/.stamp" ] || { say "no toolchain at $TOOLCHAIN (scripts/toolchain.sh)"; exit 1; }
    done
    [ -n "$(label "$DESKTOP" arena.inputs)" ] || { say "no desktop image $DESKTOP (scripts/image.sh $DESKTOP)"; exit 1; }
    mkdir -p "$STATE"
    exec 8>"$STATE/build.lock"
    flock 8 # one build at a time
    trap 'rm -rf "$STATE"/context.*' EXIT
    want=$(coding_hash "$DESKTOP")
    [ "$(label "$IMAGE" arena.inputs)" = "$want" ] && exit 0
    # The toolchain is this host's build (Aider's venv of /usr/bin/python3, Claude Code
    # and ruff linked to the C library): it runs in the image only where both match.
    here=$(/usr/bin/python3 -c "$RUNTIME_PY")
    there=$(docker run --rm --network none --entrypoint /usr/bin/python3 "$DESKTOP" -c "$RUNTIME_PY" 2>&1) || true
    if [ "$here" != "$there" ]; then
        say "the toolchain was built here on Python and C library '$here'; $DESKTOP has '$there': build the coding image on a host of the desktop image's Debian release"
        exit 1
    fi
    say "building $IMAGE on $DESKTOP (var/toolchain at /opt/arena/toolchain)"
    started=$SECONDS
    build_coding "$IMAGE" "$DESKTOP" "$want"
    docker image prune -f >/dev/null
    say "$IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{ printf "%d MB", $1 / 1e6 }'), built in $((SECONDS - started)) s"
    exit 0
fi
if [ "${1:-}" = --hash ]; then
    inputs_hash
    exit 0
fi
[ $# -eq 1 ] || { echo "usage: scripts/image.sh IMAGE | --hash" >&2; exit 2; }
IMAGE=$1
command -v mmdebstrap >/dev/null 2>&1 || { say "mmdebstrap is missing (scripts/docker.sh install)"; exit 1; }
mkdir -p "$STATE"
exec 8>"$STATE/build.lock"
flock 8 # one build at a time
# What a failed build leaves (the lock makes them this build's).
trap 'rm -rf "$STATE/base.tar" "$STATE"/context.*' EXIT

want=$(inputs_hash)
[ "$(label "$IMAGE" arena.inputs)" = "$want" ] && exit 0
base_want=$(base_hash)
base="$BASE_REPO:$base_want"
if [ "$(label "$base" arena.base-inputs)" != "$base_want" ]; then
    say "building the base $base (mmdebstrap, $SUITE)"
    build_base "$base" "$base_want"
fi
say "building $IMAGE on $base"
build_layer "$IMAGE" "$base" "$want"
# Older bases of ours and the images this one replaced, now untagged.
docker image ls --format '{{.Repository}}:{{.Tag}}' "$BASE_REPO" | grep -vxF "$base" \
    | xargs -r docker image rm >/dev/null 2>&1 || true
docker image prune -f >/dev/null
say "$IMAGE: $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{ printf "%d MB", $1 / 1e6 }')"
