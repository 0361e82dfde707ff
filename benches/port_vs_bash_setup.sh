# shellcheck shell=bash
# The `setup` case of port_vs_bash.sh (sourced by it once WORK, AGENT, HOST and the package
# layouts are set): the EFA mirror, a fresh node per run and the stages, replacing the
# generic ones.

# The bash package's step scripts below skyhook_dir/ (steps/, steps_check/) run as programs.
find "$WORK/bash/skyhook_dir" -name '*.sh' -exec chmod +x {} +

# The layer's fake EFA installer archive (a script its fake tar runs) as a real tar.gz,
# served on 127.0.0.1 for the port's fs::fetch; the bash package downloads with the
# layer's curl from the same mirror.
EFA=aws-efa-installer-1.47.0.tar.gz
mkdir -p "$WORK/mirror" "$WORK/efa"
(cd "$WORK/efa" && sh "$OLDPWD/tests/fakehosts/$HOST/usr/share/fakehost/mirror/$EFA")
tar -C "$WORK/efa" -czf "$WORK/mirror/$EFA" aws-efa-installer
PORT_FILE=$WORK/mirror.port
python3 - "$WORK/mirror" "$PORT_FILE" <<'PY' &
import http.server, functools, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
handler = functools.partial(Quiet, directory=sys.argv[1])
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
open(sys.argv[2], "w").write(str(srv.server_address[1]))
srv.serve_forever()
PY
MIRROR_PID=$!
trap 'kill $MIRROR_PID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 50); do [ -s "$PORT_FILE" ] && break; sleep 0.1; done
[ -s "$PORT_FILE" ] || { echo "port_vs_bash.sh: the mirror did not start" >&2; exit 1; }
EFA_URL=http://127.0.0.1:$(cat "$PORT_FILE")/$EFA

# A fresh node at $1 with package $2 at /pkg: the gke node as the tests build it (the layer's
# flattened links made symlinks again: /dev/disk/by-id, apt-get, the running kernel and machine
# in /proc/sys/kernel), the disks' sysfs, the tools the bash steps call.
node() {
    local r=$1 f t p n d
    rm -rf "$r"
    scripts/make-host-root.sh "$r" >/dev/null
    rm -f "$r"/usr/local/bin/{systemctl,sysctl,service,reboot}
    cp -a "tests/fakehosts/$HOST/." "$r/"
    for t in find xargs mktemp readlink awk; do
        p=$(command -v $t)
        for f in "$p" $(ldd "$p" 2>/dev/null | grep -o '/[^ ]*'); do
            f=$(readlink -f "$f"); mkdir -p "$r$(dirname "$f")"; cp -n "$f" "$r$f"
        done
        mkdir -p "$r$(dirname "$p")"; cp -n "$p" "$r$p"
    done
    mkdir -p "$r/dev" && rm -f "$r/dev/null" && mknod -m 666 "$r/dev/null" c 1 3
    for f in "$r"/dev/disk/by-id/* "$r/usr/local/bin/apt-get" "$r"/proc/sys/kernel/{osrelease,arch}; do
        [ -f "$f" ] && ln -sfn "$(cat "$f")" "$f"
    done
    # sysfs and udev records of the instance-store disks, as a node has them (plain directories
    # here).
    for f in "$r"/dev/disk/by-id/*NVMe_Instance_Storage_*; do
        n=$(basename "$(readlink "$f")")
        d=$r/sys/class/block/$n
        mkdir -p "$d/device"
        echo 7500000000 > "$d/size"
        echo "259:${n//[!0-9]/}" > "$d/dev"
        echo "Amazon EC2 NVMe Instance Storage" > "$d/device/model"
        echo "${f##*_}" > "$d/device/serial"
        mkdir -p "$r/run/udev/data"
        printf 'E:ID_MODEL=Amazon_EC2_NVMe_Instance_Storage\nE:ID_SERIAL_SHORT=%s\n' "${f##*_}" \
            > "$r/run/udev/data/b$(cat "$d/dev")"
    done
    cp -r "$WORK/$2" "$r/pkg"
    mkdir -p "$r/pkg/configmaps"
    printf eks > "$r/pkg/configmaps/service"
    printf h100 > "$r/pkg/configmaps/accelerator"
}

# Milliseconds for every stage of package $1 on a fresh root (root building not counted).
stages() {
    local r=$WORK/root-$1 t0 t1 mode n=0
    node "$r" "$1"
    t0=$(date +%s%N)
    for mode in apply apply-check apply; do
        n=$((n + 1))
        env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            SKYHOOK_RESOURCE_ID=setup-0000-1_nvidia_setup_0.2.1 COPY_RESOLV=false \
            SKYHOOK_ROOT_DIR=/state SKYHOOK_LOG_DIR=/log NVIDIA_EFA_URL="$EFA_URL" \
            "$AGENT" $mode "$r" /pkg >"$WORK/out-$1-$n-$mode" 2>&1 \
            || echo "$mode" >> "$WORK/failed-$1"
    done
    t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000000 ))
}
