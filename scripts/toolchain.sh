#!/usr/bin/env bash
# Installs, idempotently, what the sandboxes run besides the host's /usr: the CLI coding
# agents and the judge's tools, into var/toolchain/ (bound read-only at
# /opt/arena/toolchain in a sandbox whose spec asks for it: sandboxes/local_backend.py).
#
#   npm/     Claude Code and the Codex CLI, from toolchain/package-lock.json (npm ci)
#   aider/   a venv of /usr/bin/python3 (the sandbox's python) with Aider, from
#            toolchain/aider-requirements.txt (pip freeze, every package pinned)
#   pylib/   lizard and its dependencies (pip --target), for `python3 -m lizard` with
#            PYTHONPATH=/opt/arena/toolchain/pylib
#   bin/     claude, codex, aider, lizard: small wrappers that exec the real entry points
#            by their /opt/arena/toolchain paths, and ruff (the project's own binary,
#            copied); the sandbox's PATH starts here
#
# Each step is skipped when its stamp (the lock's hash) says it is done; one line each.
# Every directory on the way must be o+x: the sandboxes' uids traverse it.
set -euo pipefail
cd "$(dirname "$0")/.."

# sandboxes/local_backend.py TOOLCHAIN_DIR binds this directory
DEST=var/toolchain
INSIDE=/opt/arena/toolchain
SANDBOX_PYTHON=/usr/bin/python3

say() { printf 'toolchain: %s\n' "$*"; }
hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }
stamped() { [ "$(cat "$1" 2>/dev/null || true)" = "$2" ]; }

mkdir -p "$DEST/bin"
# The sandbox uids read and traverse everything here; nobody but root writes it.
chmod 755 "$DEST" "$DEST/bin"
parent="$DEST"
while parent=$(dirname "$parent") && [ "$parent" != . ] && [ "$parent" != / ]; do
    chmod o+x "$parent"
done

install_npm() {
    local want
    want=$(hash_of toolchain/package.json toolchain/package-lock.json)
    if stamped "$DEST/npm/.stamp" "$want"; then
        say "npm agents: up to date"
        return 0
    fi
    command -v npm >/dev/null 2>&1 || { say "npm agents: npm is missing (Debian: npm)"; exit 1; }
    say "npm agents: installing (npm ci)"
    rm -rf "$DEST/npm"
    mkdir -p "$DEST/npm"
    cp toolchain/package.json toolchain/package-lock.json "$DEST/npm/"
    # Claude Code's engines field asks for Node 22; its entry point is a native binary
    # (an optional dependency per platform), so Debian's Node 20 only unpacks it.
    (cd "$DEST/npm" && npm ci --no-audit --no-fund --loglevel=error --engine-strict=false >/dev/null)
    local claude="$DEST/npm/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
    local codex="$DEST/npm/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
    for binary in "$claude" "$codex"; do
        [ -x "$binary" ] || { say "npm agents: $binary is missing after npm ci"; exit 1; }
    done
    chmod -R a+rX "$DEST/npm"
    echo "$want" > "$DEST/npm/.stamp"
}

install_aider() {
    local want
    want="$(hash_of toolchain/aider-requirements.txt) $($SANDBOX_PYTHON -V 2>&1)"
    if stamped "$DEST/aider/.stamp" "$want"; then
        say "aider: up to date"
        return 0
    fi
    say "aider: installing ($SANDBOX_PYTHON venv, toolchain/aider-requirements.txt)"
    rm -rf "$DEST/aider"
    $SANDBOX_PYTHON -m venv "$DEST/aider"
    # The lock holds every package: no resolution, nothing unpinned comes in. The pip
    # index is the machine's own configuration, as for the project's own locks.
    "$DEST/aider/bin/python" -m pip install -q --disable-pip-version-check --no-deps \
        -r toolchain/aider-requirements.txt 2> >(grep -v "^WARNING: Location" >&2)
    chmod -R a+rX "$DEST/aider"
    echo "$want" > "$DEST/aider/.stamp"
}

install_pylib() {
    local want
    want="$(hash_of toolchain/pylib-requirements.txt) $($SANDBOX_PYTHON -V 2>&1)"
    if stamped "$DEST/pylib/.stamp" "$want"; then
        say "pylib (lizard): up to date"
        return 0
    fi
    say "pylib (lizard): installing"
    rm -rf "$DEST/pylib"
    PIP_ROOT_USER_ACTION=ignore $SANDBOX_PYTHON -m pip install -q --disable-pip-version-check \
        --no-deps --target "$DEST/pylib" -r toolchain/pylib-requirements.txt \
        2> >(grep -v "^WARNING: Location" >&2)
    chmod -R a+rX "$DEST/pylib"
    echo "$want" > "$DEST/pylib/.stamp"
}

install_ruff() {
    if [ ! -x .venv/bin/ruff ]; then
        say "ruff: no .venv/bin/ruff (scripts/setup.sh test installs it); skipped"
        return 0
    fi
    if cmp -s .venv/bin/ruff "$DEST/bin/ruff"; then
        say "ruff: up to date"
        return 0
    fi
    say "ruff: copying .venv/bin/ruff (a static binary)"
    install -m 755 .venv/bin/ruff "$DEST/bin/ruff"
}

# One wrapper: `wrapper NAME LINES...` writes $DEST/bin/NAME when its text changed.
wrapper() {
    local name=$1
    shift
    local text
    text=$(printf '#!/bin/sh\n# Written by scripts/toolchain.sh: runs inside a sandbox, at %s.\n' "$INSIDE/bin/$name"
        printf '%s\n' "$@")
    if [ "$(cat "$DEST/bin/$name" 2>/dev/null || true)" != "$text" ]; then
        printf '%s\n' "$text" > "$DEST/bin/$name.tmp"
        chmod 755 "$DEST/bin/$name.tmp"
        mv "$DEST/bin/$name.tmp" "$DEST/bin/$name"
    fi
}

write_wrappers() {
    wrapper claude "exec $INSIDE/npm/node_modules/@anthropic-ai/claude-code-linux-x64/claude \"\$@\""
    # Codex's own launcher (bin/codex.js) only finds this binary and puts its rg on PATH.
    local codex_dir="$INSIDE/npm/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl"
    wrapper codex "PATH=\"$codex_dir/codex-path:\$PATH\" CODEX_MANAGED_BY_NPM=1 exec $codex_dir/bin/codex \"\$@\""
    # The venv's python is a symlink to /usr/bin/python3 beside its pyvenv.cfg: run by this
    # path it is the venv, wherever the venv is mounted.
    wrapper aider "exec $INSIDE/aider/bin/python -c 'import sys; from aider.main import main; sys.argv[0] = \"aider\"; sys.exit(main())' \"\$@\""
    wrapper lizard "PYTHONPATH=$INSIDE/pylib exec $SANDBOX_PYTHON -m lizard \"\$@\""
    say "bin: $(cd "$DEST/bin" && ls | tr '\n' ' ')"
}

install_npm
install_aider
install_pylib
install_ruff
write_wrappers
