#!/usr/bin/env bash
# The root filesystem of the small desktop image that `scripts/docker.sh image --host-usr`
# imports (the fallback to scripts/image.sh's self-contained one): a few
# kilobytes of directories, mount points and files, no programs. Its programs are the
# host's: the image says so with the label `arena.binds-host-usr=1`, and the docker
# backend then binds the host's /usr (and the few /etc paths the desktop reads) read-only
# into each container, as the local backend does into its sandboxes. So it runs only on
# an engine on this host, which needs the packages scripts/setup.sh installs (python3,
# Xvfb, xdotool, Chromium, fonts).
#
#   sandboxes/docker/rootfs.sh DIR     writes the tree into DIR (which must not exist)
#   sandboxes/docker/rootfs.sh --hash  prints the hash of the inputs (the image's label
#                                      `arena.inputs`: scripts/docker.sh rebuilds when
#                                      it changes)
set -euo pipefail
cd "$(dirname "$0")/../.."

INPUTS=(
    sandboxes/docker/rootfs.sh
    sandboxes/docker/entry.py
    sandboxes/docker/chromium-wrapper
)
# Everything the sandboxes run of ours: the supervisor and its modules, the policies.
while IFS= read -r -d '' file; do INPUTS+=("$file"); done \
    < <(find sandboxes/inside -type f ! -name '*.pyc' -print0 | sort -z)

if [ "${1:-}" = --hash ]; then
    sha256sum "${INPUTS[@]}" scripts/docker.sh | sha256sum | cut -c1-16
    exit 0
fi
[ $# -eq 1 ] || { echo "usage: rootfs.sh DIR | --hash" >&2; exit 2; }
out="$1"
mkdir "$out"

# Mount points: the host's /usr and /etc paths (the backend binds them), the run's own
# dirs (/work, /run/arena) and the engine's (/proc, /dev, /sys, /tmp, the agent's and the
# display's homes). Those of the display's alone (/fb, python-xlib) are not in the image:
# the engine makes them in the display's container only, so the agent's has no /fb.
mkdir -p "$out"/{usr,proc,dev,sys,tmp,work,run/arena,opt/arena}
mkdir -p "$out"/home/{agent,display}
# /sbin is a directory of its own: the engine binds its docker-init at /sbin/docker-init,
# which cannot be made inside the read-only host /usr (the sandbox's PATH has no sbin).
mkdir -p "$out/sbin"
mkdir -p "$out"/etc/{fonts,ssl/certs,alternatives,chromium/policies/managed}
touch "$out"/etc/ld.so.cache "$out"/etc/localtime
for dir in bin lib lib64; do ln -s "usr/$dir" "$out/$dir"; done
chmod 1777 "$out/tmp"

# Who runs it by hand (the backend binds a passwd naming the slot's uid instead).
printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\n' > "$out/etc/passwd"
printf 'root:x:0:\nagent:x:1000:\n' > "$out/etc/group"
printf 'passwd: files\ngroup: files\nhosts: files\n' > "$out/etc/nsswitch.conf"

mkdir -p "$out/opt/arena/inside"
for file in sandboxes/inside/*; do
    case "$file" in *.pyc|*/__pycache__) continue ;; esac
    install -m 0444 "$file" "$out/opt/arena/inside/"
done
install -m 0444 sandboxes/docker/entry.py "$out/opt/arena/entry.py"
install -m 0555 sandboxes/docker/chromium-wrapper "$out/opt/arena/chromium"
# Chromium's managed policies: no requests of its own (docs/egress.md)
install -m 0444 sandboxes/inside/chromium-policies.json "$out/etc/chromium/policies/managed/arena.json"
