#!/bin/bash
# make-host-root.sh DIR — build a throwaway host root at DIR for demos of skyhook-agent.
#
# DIR gets: the machine's merged-/usr symlinks (bin -> usr/bin, lib -> usr/lib, ...), sh, bash
# and basic coreutils with every shared library ldd lists (so the dynamic loader path
# resolves inside DIR), a copy of /etc/os-release, an empty DIR/tmp (1777), DIR/dev/null (the
# character device 1:3, mode 0666, so that a command's `> /dev/null` inside the root writes
# nothing there instead of creating a regular file), and recording
# stubs DIR/usr/local/bin/{systemctl,reboot,sysctl,service} that append "<name> <args>" to
# DIR/var/log/calls (host path /var/log/calls) and exit 0. Nothing outside DIR is changed.
#
# Idempotent: running it again on the same DIR refreshes the copies and stubs, and keeps
# anything else in DIR (state, logs, packages). Prints DIR (absolute) on stdout.
#
# Use (as root, since the agent chroots):
#   R=$(scripts/make-host-root.sh /tmp/demo-root)
#   mkdir -p "$R/var/lib/skyhook/demo/pkg" && cp -r my-package/* "$R/var/lib/skyhook/demo/pkg"
#   SKYHOOK_RESOURCE_ID=demo-uid-1_mypkg_1.0.0 COPY_RESOLV=false \
#     PATH=/usr/local/bin:/usr/bin:/bin skyhook-agent apply "$R" /var/lib/skyhook/demo/pkg
#   cat "$R/var/log/calls"
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
mkdir -p "$1"
DIR=$(cd "$1" && pwd -P)
if [ "$DIR" = / ]; then
    echo "$0: refusing to use / as a throwaway root" >&2
    exit 2
fi

TOOLS="sh dash bash cat cp mv rm mkdir rmdir ls ln chmod touch sleep env pwd printf echo
       true false test head tail tr cut grep sed date id uname basename dirname wc sort"

# Reproduce the real path $1 under $DIR: symlinks on the way are recreated and followed,
# directories created, the final file copied.
mirror() {
    local path=$1 cur="" comp rest target
    rest=${path#/}
    while [ -n "$rest" ]; do
        comp=${rest%%/*}
        if [ "$comp" = "$rest" ]; then rest=""; else rest=${rest#*/}; fi
        cur="$cur/$comp"
        if [ -L "$cur" ]; then
            target=$(readlink "$cur")
            [ -L "$DIR$cur" ] || [ -e "$DIR$cur" ] || ln -s "$target" "$DIR$cur"
            case $target in
                /*) ;;
                *) target="$(dirname "$cur")/$target" ;;
            esac
            target=$(realpath -m -s "$target${rest:+/$rest}")
            mirror "$target"
            return
        elif [ -d "$cur" ]; then
            [ -d "$DIR$cur" ] || mkdir -m 0755 "$DIR$cur"
        else
            cp -f "$cur" "$DIR$cur"
        fi
    done
}

for top in bin sbin lib lib64 lib32 libx32; do
    if [ -L "/$top" ]; then mirror "/$top"; fi
done

bins=()
for t in $TOOLS; do
    for d in /usr/bin /bin /usr/sbin /sbin; do
        if [ -e "$d/$t" ]; then bins+=("$d/$t"); break; fi
    done
done
for b in "${bins[@]}"; do mirror "$b"; done
ldd "${bins[@]}" 2>/dev/null | grep -o '/[^ ]* (0x' | sed 's/ (0x$//' | sort -u | while read -r lib; do
    mirror "$lib"
done

mkdir -p "$DIR/etc" "$DIR/tmp" "$DIR/var/log" "$DIR/usr/local/bin" "$DIR/dev"
chmod 1777 "$DIR/tmp"

# /dev/null: kept when it already is the null device with mode 0666, else (missing, another
# mode, or a regular file a command made) replaced by it.
if [ "$(stat -c '%F %t:%T %a' "$DIR/dev/null" 2>/dev/null)" != "character special file 1:3 666" ]; then
    rm -rf "$DIR/dev/null"
    mknod -m 0666 "$DIR/dev/null" c 1 3
fi
if ! (: > "$DIR/dev/null") 2>/dev/null; then
    echo "$0: warning: $DIR/dev/null cannot be opened (is $DIR on a nodev mount?)" >&2
fi
if [ -e /etc/os-release ]; then cp -fL /etc/os-release "$DIR/etc/os-release"; fi

for stub in systemctl reboot sysctl service; do
    cat > "$DIR/usr/local/bin/$stub" <<STUB
#!/bin/sh
# Recording stub made by make-host-root.sh: logs the call, changes nothing.
echo "$stub \$*" >> /var/log/calls
exit 0
STUB
    chmod 0755 "$DIR/usr/local/bin/$stub"
done

echo "$DIR"
