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
