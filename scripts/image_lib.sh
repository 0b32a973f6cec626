# Helpers of the offline image builds (scripts/image.sh: the sandboxes' images;
# scripts/app_image.sh: the arena's own image), sourced by both.

# The Debian archives apt uses (origin Debian), as one-line sources: "deb URI SUITE COMP".
sources() {
    apt-cache policy | awk '
        /^ *[0-9]+ (https?|file):/ { uri = $2; split($3, sc, "/"); next }
        uri != "" && /release .*o=Debian,/ { print "deb " uri " " sc[1] " " sc[2] }
        { uri = "" }' | sort -u
}

# The build's clock: the date of the snapshot apt's sources name (the comment Debian's
# images leave above each URI), else a fixed date; a new one means a new base.
epoch() {
    local stamp
    stamp=$(grep -rhoE 'snapshot\.debian\.org/archive/debian/[0-9]{8}T[0-9]{6}Z' \
        /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | head -n1 | grep -oE '[0-9]{8}T[0-9]{6}' || true)
    if [ -n "$stamp" ]; then
        date -u -d "${stamp:0:8} ${stamp:9:2}:${stamp:11:2}:${stamp:13:2}" +%s
    else
        echo 1748736000 # 2025-06-01
    fi
}

label() { docker image inspect -f "{{ index .Config.Labels \"$2\" }}" "$1" 2>/dev/null || true; }

# A Debian root file system as a tarball, by mmdebstrap from the given one-line sources:
#   debian_tar VARIANT SUITE PACKAGES TAR DEBS MIRRORS_FILE [mmdebstrap options…]
# without recommends, manuals or documentation but the copyrights, at the pinned clock
# (epoch), the .debs it downloads kept in DEBS (a rebuild downloads only what the mirror
# changed since); the options after the sixth argument add hooks of the image's own.
# Its text is part of both builds' base hashes.
debian_tar() {
    local variant=$1 suite=$2 packages=$3 tar=$4 debs=$5 mirrors_file=$6
    shift 6
    local -a mirrors=()
    while IFS= read -r line; do mirrors+=("$line"); done <"$mirrors_file"
    [ ${#mirrors[@]} -gt 0 ] || { say "apt names no Debian mirror (apt-cache policy)"; exit 1; }
    mkdir -p "$debs"
    SOURCE_DATE_EPOCH=$(epoch) TMPDIR="$(dirname "$tar")" mmdebstrap \
        --quiet \
        --mode=root \
        --variant="$variant" \
        --architectures="$(dpkg --print-architecture)" \
        --format=tar \
        --include="$packages" \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --skip=download/empty --skip=essential/unlink \
        --setup-hook='mkdir -p "$1"/var/cache/apt/archives' \
        --setup-hook="sync-in '$debs' /var/cache/apt/archives/" \
        --customize-hook="sync-out /var/cache/apt/archives '$debs'" \
        --customize-hook='rm -f "$1"/var/cache/apt/archives/*.deb "$1"/etc/resolv.conf "$1"/etc/hostname' \
        "$@" \
        "$suite" "$tar" "${mirrors[@]}"
}
