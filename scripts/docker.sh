#!/usr/bin/env bash
# A private Docker engine for the docker sandbox backend's tests (and for trying the
# backend by hand), and the desktop image it runs, built without a registry.
#
#   scripts/docker.sh install   Debian's docker.io, mmdebstrap, openssh-server (the
#                               ssh:// remote engine's test) and docker-compose (the
#                               compose stack's check), each only when missing
#                               (root only)
#   scripts/docker.sh start     the private daemon; prints DOCKER_HOST=unix://…
#   scripts/docker.sh stop      stops it (by its pid file) and whatever it left running,
#                               unless a test session uses it (stop --force: even then)
#   scripts/docker.sh image     builds the desktop image on it: self-contained, from the
#                               Debian mirror apt uses (scripts/image.sh)
#   scripts/docker.sh image --coding     builds the desktop image, then the coding image
#                               on it: the toolchain (scripts/toolchain.sh, run when
#                               var/toolchain is missing) at /opt/arena/toolchain
#   scripts/docker.sh image --host-usr   builds the small image that binds the host's
#                               /usr instead (sandboxes/docker/rootfs.sh; a fallback)
#   scripts/docker.sh host      prints DOCKER_HOST=unix://… without starting anything
#   scripts/docker.sh status    exit 0 when the private daemon answers
#
# The daemon is this checkout's own: its socket, data root, pid file and log are under
# var/docker/ (the socket under /run when that path would be too long for a unix
# socket), its exec root under /run. It has no default bridge, touches no iptables,
# ip6tables or sysctl (a published port of the compose stack, `make deploy-check`, goes
# through Docker's userland proxy on the host) and stores images and containers with overlay2 where
# this kernel and file system mount it (a probe at start), else with vfs (plain copies
# of the whole image per container); ARENA_DOCKER_STORAGE=vfs|overlay2 decides instead.
# It reads no /etc/docker/daemon.json. ARENA_DOCKER_STATE names another state dir (a
# second engine beside this one, for a benchmark). Every subcommand is idempotent:
# `start` reuses a running daemon, `image` rebuilds only when its inputs changed.
# The sandboxes' containers are only ever started with network mode `none`.
set -euo pipefail
cd "$(dirname "$0")/.."

REPO="$PWD"
STATE="${ARENA_DOCKER_STATE:-$REPO/var/docker}"
# One exec root per checkout (two checkouts on one machine get two daemons).
TAG=$(printf '%s' "${ARENA_DOCKER_STATE:-$REPO}" | sha256sum | cut -c1-8)
EXEC_ROOT="/run/arena-docker-$TAG"
SOCKET="$STATE/docker.sock"
[ ${#SOCKET} -lt 100 ] || SOCKET="$EXEC_ROOT.sock"
PIDFILE="$STATE/dockerd.pid"
LOG="$STATE/dockerd.log"
IMAGE="${ARENA_DOCKER_IMAGE:-agent-arena-desktop}"
HOST_USR_IMAGE=agent-arena-desktop-host-usr
CODING_IMAGE="${ARENA_DOCKER_CODING_IMAGE:-agent-arena-coding}"
START_TIMEOUT_S=60

say() { printf 'docker.sh: %s\n' "$*" >&2; }
dock() { docker -H "unix://$SOCKET" "$@"; }

daemon_pid() {
    local pid
    pid=$(cat "$PIDFILE" 2>/dev/null || true)
    [ -n "$pid" ] && alive "$pid" && grep -q dockerd "/proc/$pid/comm" 2>/dev/null && echo "$pid"
}

answers() { dock version >/dev/null 2>&1; }

cmd_install() {
    local missing=()
    command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)  # scripts/image.sh
    # tests/sandboxes/test_docker_ssh.py: an engine reached with DOCKER_HOST=ssh://
    [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
    command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)  # make deploy-check
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "missing: ${missing[*]} (run: sudo apt-get install ${missing[*]}); the real-engine tests skip"
        return 0
    fi
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# overlay2 when an overlay mount works in the data root's file system (this kernel has
# it and the file system can be its upper layer), else vfs.
storage_driver() {
    if [ -n "${ARENA_DOCKER_STORAGE:-}" ]; then
        echo "$ARENA_DOCKER_STORAGE"
        return 0
    fi
    local probe="$STATE/overlay-probe" driver=vfs
    rm -rf "$probe"
    mkdir -p "$probe"/{lower,upper,work,merged}
    if mount -t overlay overlay -o "lowerdir=$probe/lower,upperdir=$probe/upper,workdir=$probe/work" \
        "$probe/merged" 2>/dev/null; then
        umount "$probe/merged" && driver=overlay2
    fi
    rm -rf "$probe"
    echo "$driver"
}

# The pids of this daemon's containerd shims (and its managed containerd): they name
# this checkout's exec root on their command lines, nothing else does.
leftovers() {
    local dir pid
    for dir in /proc/[0-9]*; do
        pid=${dir#/proc/}
        [ "$pid" = "$$" ] && continue
        { tr '\0' ' ' < "$dir/cmdline"; } 2>/dev/null | grep -qF "$EXEC_ROOT/" && echo "$pid"
    done
    return 0
}

cmd_start() {
    mkdir -p "$STATE"
    exec 9>"$STATE/daemon.lock"
    flock 9  # one start or stop at a time
    mkdir -p "$STATE/data" "$EXEC_ROOT"
    local driver
    driver=$(storage_driver)
    if [ -n "$(daemon_pid)" ] && answers; then
        # One started with vfs (before overlay2 was probed for) is restarted with
        # overlay2, but only while no test session uses it; nothing else restarts it.
        if [ "$driver" != overlay2 ] || [ "$(dock info -f '{{ .Driver }}' 2>/dev/null)" != vfs ] \
            || ! flock -n -x "$STATE/sessions" true; then
            echo "DOCKER_HOST=unix://$SOCKET"
            return 0
        fi
        say "restarting the daemon with the $driver storage driver"
    fi
    [ -n "$(daemon_pid)" ] && stop_locked  # running but not answering: start afresh
    command -v dockerd >/dev/null 2>&1 || { say "dockerd is not installed (scripts/docker.sh install)"; exit 1; }
    echo '{}' > "$STATE/daemon.json"
    rm -f "$SOCKET"
    # setsid: the daemon outlives this script and is in no caller's process group. It
    # keeps none of the caller's open files (a lock file of the tests' sessions, held by
    # a caller, would stay locked for as long as the daemon runs).
    (close_inherited_files; exec setsid dockerd \
        --config-file "$STATE/daemon.json" \
        --host "unix://$SOCKET" \
        --data-root "$STATE/data" \
        --exec-root "$EXEC_ROOT" \
        --pidfile "$PIDFILE" \
        --storage-driver "$driver" \
        --bridge none \
        --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
        --userland-proxy=true \
        --exec-opt native.cgroupdriver=cgroupfs \
        --shutdown-timeout 2 \
        --log-level warn \
        </dev/null >>"$LOG" 2>&1) &
    local started=$SECONDS
    until answers; do
        if ! kill -0 $! 2>/dev/null; then
            say "dockerd exited while starting; the end of $LOG:"
            tail -n 20 "$LOG" >&2
            exit 1
        fi
        if [ $((SECONDS - started)) -ge $START_TIMEOUT_S ]; then
            say "dockerd did not answer within ${START_TIMEOUT_S}s; see $LOG"
            stop_locked
            exit 1
        fi
        sleep 0.1
    done
    echo "DOCKER_HOST=unix://$SOCKET"
}

# Closes every file the current (sub)shell has open but stdin, stdout and stderr:
# cmd_start's subshell does before it becomes the daemon.
close_inherited_files() {
    local fd
    for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        [ "$fd" -gt 2 ] && [ "$fd" -ne 255 ] && eval "exec $fd>&-"
    done
    return 0
}

# Whether a process runs: a zombie does not (dockerd exits to a zombie when its parent is
# a subreaper that has not reaped it yet — a test session or a benchmark).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

stop_locked() {
    local pid waited=0
    pid=$(daemon_pid || true)
    if [ -n "$pid" ]; then
        # Sandboxes keep nothing worth a graceful stop; the daemon would wait up to each
        # container's stop timeout (10 s) for one that ignores SIGTERM.
        local running
        running=$(dock ps -q 2>/dev/null || true)
        # shellcheck disable=SC2086 # a list of ids
        [ -z "$running" ] || dock kill $running >/dev/null 2>&1 || true
        kill -TERM "$pid" 2>/dev/null || true
        # It stops its containers first, then its containerd.
        while alive "$pid" && [ $waited -lt 200 ]; do sleep 0.1; waited=$((waited + 1)); done
        alive "$pid" && { say "dockerd $pid did not stop; killing it"; kill -KILL "$pid" 2>/dev/null || true; }
        while alive "$pid"; do sleep 0.1; done
    fi
    local rest
    rest=$(leftovers)
    if [ -n "$rest" ]; then
        # shellcheck disable=SC2086 # a list of pids
        kill -KILL $rest 2>/dev/null || true
        for pid in $rest; do while alive "$pid"; do sleep 0.05; done; done
    fi
    # Mounts a killed daemon left (a container's /dev/shm, its netns files), deepest first.
    awk -v a="$STATE/data/" -v b="$EXEC_ROOT/" 'index($2, a) == 1 || index($2, b) == 1 { print $2 }' \
        /proc/self/mounts | sort -r | while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done
    rm -f "$PIDFILE" "$SOCKET"
}

cmd_stop() {
    mkdir -p "$STATE"
    # A pytest session holds var/docker/sessions (shared) while it uses the daemon
    # (tests/docker_engine.py): never pull it from under one. `stop --force` does.
    if [ "${1:-}" != --force ] && ! flock -n -x "$STATE/sessions" true; then
        say "a test session is using the daemon; not stopping it (stop --force does)"
        exit 1
    fi
    exec 9>"$STATE/daemon.lock"
    flock 9
    stop_locked
}

cmd_image() {
    answers || { say "the private daemon does not answer (scripts/docker.sh start)"; exit 1; }
    if [ "${1:-}" != --host-usr ]; then
        DOCKER_HOST="unix://$SOCKET" bash scripts/image.sh "$IMAGE"
        if [ "${1:-}" = --coding ]; then
            local stamp
            for stamp in npm aider pylib; do
                [ -f "var/toolchain/$stamp/.stamp" ] || { bash scripts/toolchain.sh >&2; break; }
            done
            DOCKER_HOST="unix://$SOCKET" bash scripts/image.sh --coding "$CODING_IMAGE" "$IMAGE"
        fi
        return 0
    fi
    local image="$HOST_USR_IMAGE"
    mkdir -p "$STATE"
    exec 8>"$STATE/image.lock"
    flock 8  # one build at a time
    local want have
    want=$(bash sandboxes/docker/rootfs.sh --hash)
    have=$(dock image inspect -f '{{ index .Config.Labels "arena.inputs" }}' "$image" 2>/dev/null || true)
    [ "$have" = "$want" ] && return 0
    say "building $image (sandboxes/docker/rootfs.sh, binds the host's /usr)"
    local tmp
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    bash sandboxes/docker/rootfs.sh "$tmp/rootfs"
    tar --numeric-owner -C "$tmp/rootfs" -c . | dock import \
        --change 'LABEL arena.binds-host-usr=1' \
        --change 'LABEL arena.image-version=1' \
        --change "LABEL arena.inputs=$want" \
        --change 'ENV HOME=/home/agent LANG=C.UTF-8 PATH=/usr/bin:/bin' \
        --change 'USER 1000:1000' \
        --change 'WORKDIR /work' \
        --change 'ENTRYPOINT ["/usr/bin/python3", "-I", "/opt/arena/entry.py"]' \
        --change 'CMD ["{}"]' \
        - "$image" >/dev/null
    # The image it replaced, now untagged.
    dock image prune -f >/dev/null
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop "${2:-}" ;;
    image) cmd_image "${2:-}" ;;
    host) echo "DOCKER_HOST=unix://$SOCKET" ;;
    status) answers ;;
    *) echo "usage: scripts/docker.sh install|start|stop|image [--coding|--host-usr]|host|status" >&2; exit 2 ;;
esac
