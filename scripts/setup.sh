#!/usr/bin/env bash
# Installs what the arena needs, idempotently: the locked Python dependencies into .venv,
# built on a Python >= 3.12 found on this machine; the Debian packages the sandboxes run
# (only the missing ones, only when we may install them; in test mode also Debian's
# docker.io and mmdebstrap, for the docker backend's tests and its image); and the
# sandboxes' toolchain (the CLI coding agents and the judge's tools: scripts/toolchain.sh,
# into var/toolchain/).
#
#   scripts/setup.sh           what the web server needs to answer: the runtime
#                              (requirements.lock) and the data dir's secret key. `make
#                              run` runs this before its first page, and the two below
#                              in the background once the page answers (docs/operations.md)
#   scripts/setup.sh debian    the Debian packages the sandboxes need
#   scripts/setup.sh sandboxes those and the toolchain (`make setup-sandboxes`)
#   scripts/setup.sh bytecode  the .venv's bytecode, when `make run` installed it
#   scripts/setup.sh test      all of it, with the test tools (requirements-test.lock)
#
# The sandboxes and test modes also compile the rating fit's loops ahead of time into .venv
# (ratings.kernels_aot, with gcc; test mode installs it): a fit then runs them without
# loading numba, and compiles them just in time when they are missing.
#
# A .venv that has the test lock has the runtime too: `make run` after `make test`
# installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

MODE="${1:-run}"
case "$MODE" in
    run | test | debian | sandboxes | bytecode) ;;
    *) echo "setup: usage: scripts/setup.sh [run|debian|sandboxes|bytecode|test]" >&2; exit 2 ;;
esac

# What creating .venv needs (Debian's python3 has no ensurepip without python3-venv).
RUNTIME_PACKAGES=(python3 python3-venv curl)
# What the sandboxes run.
SANDBOX_PACKAGES=(bubblewrap chromium xvfb xdotool procps fonts-dejavu-core
    tesseract-ocr tesseract-ocr-eng libseccomp2 util-linux strace gdb
    nodejs git patch python3-pip python3-pytest)
# (python3-venv and python3-pip build the sandbox toolchain on the system python3, which
# is the sandboxes' python; python3-pytest, git and patch are the judge sandbox's.)
# What the tests need besides: a C compiler for the fit's loops built ahead of time (the
# tests compare them with numba's).
TEST_PACKAGES=(gcc)

say() { printf 'setup: %s\n' "$*"; }

install_debian_packages() {
    command -v dpkg-query >/dev/null 2>&1 || { say "not a Debian system; install $* yourself"; return 0; }
    local missing=()
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    # Debian's nodejs comes without npm (a package of its own); NodeSource's has it.
    case " $* " in *" nodejs "*) command -v npm >/dev/null 2>&1 || missing+=(npm) ;; esac
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        say "missing Debian packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})"
        return 0
    fi
    say "installing Debian packages: ${missing[*]}"
    # (an install stopped half-way, e.g. `make run` stopped during its background step,
    # is finished first)
    dpkg --configure -a >/dev/null 2>&1 || true
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

python_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; }

find_python() {
    local candidates=()
    [ -n "${ARENA_PYTHON:-}" ] && candidates+=("$ARENA_PYTHON")
    candidates+=(python3.13 python3.12 python3)
    local root="${PYENV_ROOT:-$HOME/.pyenv}"
    if [ -d "$root/versions" ]; then
        # newest first
        while IFS= read -r dir; do candidates+=("$dir/bin/python3"); done \
            < <(ls -d "$root"/versions/3.* 2>/dev/null | sort -V -r)
    fi
    for c in "${candidates[@]}"; do
        local path
        path=$(command -v "$c" 2>/dev/null || true)
        [ -n "$path" ] && python_ok "$path" && { echo "$path"; return 0; }
    done
    return 1
}

install_python_env() {
    if [ -x .venv/bin/python ] && ! python_ok .venv/bin/python; then
        say ".venv has an old Python; recreating it"
        rm -rf .venv
    fi
    if [ ! -x .venv/bin/python ]; then
        local py
        py=$(find_python) || { say "no Python >= 3.12 found (install python3.12 or set ARENA_PYTHON)"; exit 1; }
        say "creating .venv with $py"
        "$py" -m venv .venv
    fi
    local want_uv
    want_uv=$(sed -n 's/^uv==\([^ ]*\).*/\1/p' requirements.lock | head -n 1)
    if ! .venv/bin/uv --version 2>/dev/null | grep -q " $want_uv"; then
        .venv/bin/python -m pip install -q --disable-pip-version-check "uv==$want_uv"
    fi
    # A stamp of the synced lock (its name and hash) skips the sync when nothing changed.
    # Bytecode is compiled at install for the tests: the suite runs with
    # PYTHONDONTWRITEBYTECODE, and without .pyc files every process compiles the provider
    # SDKs again (seconds per Daphne or worker start on this machine). `make run` does
    # not wait for it (about a minute on two busy cores): its processes write the .pyc of
    # what they import, and the rest is compiled in the background (`setup.sh bytecode`).
    local stamp=.venv/.lock-stamp
    local lock=requirements.lock
    [ "$MODE" = test ] && lock=requirements-test.lock
    local hash want have
    hash="$lock $(sha256sum "$lock" | cut -d' ' -f1)"
    want="$hash compiled"
    have=$(cat "$stamp" 2>/dev/null || true)
    if [ "$have" = "$want" ]; then
        return 0
    fi
    if [ "$MODE" = run ] && [ "$have" = "$hash" ]; then
        return 0  # synced; the bytecode comes in the background
    fi
    if [ "$MODE" = run ] && [ "${have%% *}" = requirements-test.lock ] &&
        [ "$have" = "requirements-test.lock $(sha256sum requirements-test.lock | cut -d' ' -f1) compiled" ]; then
        return 0  # the test lock holds the runtime
    fi
    say "installing locked Python dependencies ($lock)"
    # (with PYTHONDONTWRITEBYTECODE set nothing writes .pyc files as it imports: compiled now)
    if [ "$MODE" = run ] && [ -z "${PYTHONDONTWRITEBYTECODE:-}" ]; then
        VIRTUAL_ENV=.venv .venv/bin/uv pip sync -q --python .venv/bin/python "$lock"
        echo "$hash" > "$stamp"
    else
        VIRTUAL_ENV=.venv .venv/bin/uv pip sync -q --compile-bytecode --python .venv/bin/python "$lock"
        echo "$want" > "$stamp"
    fi
}

# The rating fit's loops compiled ahead of time (ratings.kernels_aot), once per version of
# their source: without a C compiler, or when the build fails, fits compile them just in
# time (ratings.kernels).
build_kernels() {
    local log
    if ! command -v gcc >/dev/null 2>&1; then
        say "no gcc: the rating fit's loops will be compiled just in time (ratings.kernels)"
        return 0
    fi
    log=$(.venv/bin/python -m ratings.kernels_aot build 2>&1) || {
        say "warning: the rating fit's loops did not compile ahead of time; fits compile them just in time"
        printf '%s\n' "$log" | tail -5 >&2
    }
}

# The bytecode `make run` did not wait for (see install_python_env).
compile_bytecode() {
    local stamp=.venv/.lock-stamp have
    have=$(cat "$stamp" 2>/dev/null || true)
    case "$have" in *" compiled" | "") return 0 ;; esac
    .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
    echo "$have compiled" > "$stamp"
}

# The sandboxes run the arena's own files (the supervisor, Python packages of .venv, the
# toolchain) as unprivileged slot uids, bound from this checkout: every directory from /
# down to it must let others traverse it (o+x; not read). A checkout under a private
# directory (mktemp -d, a 0700 home) gets o+x on the ones this user owns; any other is
# named, for its owner to fix.
make_checkout_traversable() {
    local dir
    dir="$(pwd -P)"
    while [ "$dir" != / ]; do
        if ! [ "$(( 0$(stat -c %a "$dir") & 1 ))" -eq 1 ]; then
            if [ "$(stat -c %u "$dir")" = "$(id -u)" ]; then
                chmod o+x "$dir" && say "made $dir traversable (o+x): sandboxes run files below it"
            else
                say "warning: $dir is not traversable by others (o+x): sandboxes cannot start"
            fi
        fi
        dir="$(dirname "$dir")"
    done
}

make_checkout_traversable
if [ "$MODE" = bytecode ]; then compile_bytecode; exit 0; fi
# Each step says what it does and, when it did anything, how long it took.
step() {
    local label=$1 started=$SECONDS
    shift
    "$@"
    local took=$((SECONDS - started))
    [ "$took" -ge 2 ] && say "$label: done in ${took} s" || true
}
step "Debian packages of the web server" install_debian_packages "${RUNTIME_PACKAGES[@]}"
if [ "$MODE" != run ]; then
    step "Debian packages of the sandboxes" install_debian_packages "${SANDBOX_PACKAGES[@]}"
fi
# The docker backend's tests run on a private engine (scripts/docker.sh) with an image
# built by mmdebstrap (scripts/image.sh): Debian's docker.io and mmdebstrap, each
# installed only when missing.
if [ "$MODE" = test ]; then
    step "Debian packages of the tests" install_debian_packages "${TEST_PACKAGES[@]}"
    bash scripts/docker.sh install
fi
case "$MODE" in
    debian) exit 0 ;;
    sandboxes)
        bash scripts/toolchain.sh
        [ -x .venv/bin/python ] && step "the rating fit's compiled loops" build_kernels
        exit 0
        ;;
esac
step "Python packages" install_python_env
if [ "$MODE" = test ]; then
    step "the rating fit's compiled loops" build_kernels
    bash scripts/toolchain.sh
fi
# The secret key of the data dir (generated once, never overwritten; arena_site/secret.py)
.venv/bin/python -m arena_site.secret "${ARENA_DATA_DIR:-var}"
