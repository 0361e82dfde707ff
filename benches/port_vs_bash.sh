#!/usr/bin/env bash
# Wall time of a bash package against its Rhai port under skyhook-agent, every stage the
# operator runs, on one fake GPU host of tests/fakehosts; both in the same run, alternating.
#
# Usage (as root: steps are chrooted; UPSTREAM is a checkout of NVIDIA/skyhook-packages):
#   cargo build --release
#   [RUNS=5] [HOST=cos-117] bash benches/port_vs_bash.sh gke UPSTREAM
#   [RUNS=5] [HOST=ubuntu-24.04-eks-x86_64] bash benches/port_vs_bash.sh tuned UPSTREAM
#   [RUNS=5] bash benches/port_vs_bash.sh setup UPSTREAM
#
# Packages: `gke` = upstream nvidia-tuning-gke on its base tuning/ (as its Dockerfile layers
# them) against examples/nvidia-tuning-gke; configMaps accelerator=gb200, intent=
# multiNodeTraining, USE_CONTAINERD=false (the bash package fails two of the other cases: its
# inference profiles on kernels without kernel.sched_*, its post-interrupt-check with the
# containerd drop-in; examples/nvidia-tuning-gke/README.md). Each run is a fresh root; the stages are config, config-check,
# interrupt (systemd-sysctl), post-interrupt-check, config again, uninstall, uninstall-check.
# A stage that fails is timed all the same and named at the end (the bash package's
# uninstall fails when no service drop-in exists, one of the bugs the port fixes).
#
# `tuned` = upstream nvidia-tuned on its base tuned/ (as its Dockerfile layers them) against
# examples/nvidia-tuned; configMaps accelerator=h100, intent=inference, service=eks,
# INTERRUPT=true, on a host that has tuned (default ubuntu-24.04-eks-x86_64). Stages: apply,
# apply-check, config, config-check, interrupt (node_restart: the fake reboot),
# post-interrupt-check, config again, uninstall, uninstall-check. The root also gets the
# package queries the layers lack (dpkg-query, rpm) and apt-get/yum as the symlinks they
# stand for, as tests/nvidia_tuned_port.rs does. FIX_LIST_GREP=1 repairs the bash config's
# profile lookup (below), without which it fails config and the checks after it.
#
# `setup` = upstream nvidia-setup against examples/nvidia-setup on ubuntu-24.04-eks-x86_64
# (service=eks, accelerator=h100: upgrade, EFA installer from the layer's mirror, OFI, chrony,
# RAID0 of the two NVMe disks with its mount units; the port's download comes from a
# 127.0.0.1 server holding the same installer as a real tar.gz); the stages are apply,
# apply-check, apply again. Its node and stages are in benches/port_vs_bash_setup.sh.
# Prints per package the median and min of RUNS runs in ms, then port / bash.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "port_vs_bash.sh: needs root (steps run in a chroot)" >&2; exit 1; }
[ $# -eq 2 ] || { echo "usage: port_vs_bash.sh gke|tuned|setup UPSTREAM_DIR" >&2; exit 2; }
which=$1 up=$2 RUNS=${RUNS:-5}
case $which in
    gke) HOST=${HOST:-cos-117} ;;
    tuned) HOST=${HOST:-ubuntu-24.04-eks-x86_64} ;;
    setup) HOST=ubuntu-24.04-eks-x86_64 ;;
    *) echo "port_vs_bash.sh: unknown package $which (gke, tuned, setup)" >&2; exit 2 ;;
esac
AGENT=${AGENT:-$PWD/target/release/skyhook-agent}
[ -x "$AGENT" ] || { echo "port_vs_bash.sh: build $AGENT first (cargo build --release)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/skyhook-port.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The bash package as its image lays it out: the base package, then the layer's files.
mkdir -p "$WORK/bash"
case $which in
    gke)
        cp -r "$up/tuning/skyhook_dir" "$WORK/bash/"
        cp -r "$up/nvidia-tuning-gke/skyhook_dir/." "$WORK/bash/skyhook_dir/"
        cp -r "$up/nvidia-tuning-gke/profiles" "$up/nvidia-tuning-gke/config.json" "$WORK/bash/"
        cp -r examples/nvidia-tuning-gke "$WORK/port" ;;
    tuned)
        cp -r "$up/tuned/skyhook_dir" "$WORK/bash/"
        cp -r "$up/nvidia-tuned/skyhook_dir/." "$WORK/bash/skyhook_dir/"
        cp -r "$up/nvidia-tuned/profiles" "$up/nvidia-tuned/config.json" "$WORK/bash/"
        cp -r examples/nvidia-tuned "$WORK/port"
        # FIX_LIST_GREP=1: let the bash config find profiles that have a summary (its
        # `grep -q "^- NAME$"` of `tuned-adm list` never matches one; README of the port),
        # so that both packages run every stage.
        if [ "${FIX_LIST_GREP:-0}" = 1 ]; then
            sed -i 's/grep -q "^- $profile\$"/grep -q "^- $profile\\( \\|\$\\)"/' \
                "$WORK"/bash/skyhook_dir/apply_tuned_profile*.sh "$WORK"/bash/skyhook_dir/post_interrupt_tuned_check.sh
        fi ;;
    setup)
        cp -r "$up/nvidia-setup/skyhook_dir" "$up/nvidia-setup/config.json" "$WORK/bash/"
        cp -r examples/nvidia-setup "$WORK/port" ;;
esac
chmod +x "$WORK"/bash/skyhook_dir/*.sh

# A fresh node at $1 with package $2 at /pkg.
node() {
    local r=$1
    rm -rf "$r"
    scripts/make-host-root.sh "$r" >/dev/null
    rm -f "$r"/usr/local/bin/{systemctl,sysctl,service,reboot}
    cp -a "tests/fakehosts/$HOST/." "$r/"
    # The layer's links its snapshot flattened into files holding the target, links again (as
    # the tests' relink): apt-get, yum, the running kernel and machine.
    for f in "$r"/usr/local/bin/{apt-get,yum} "$r"/proc/sys/kernel/{osrelease,arch}; do
        [ -f "$f" ] && [ ! -x "$f" ] && ln -sfn "$(cat "$f")" "$f"
    done
    # Tools the stubs and bash packages use, with the libraries they load.
    for t in find xargs mktemp tee; do
        for p in "$(command -v $t)" $(ldd "$(command -v $t)" | grep -o '/[^ ]*'); do
            [ -e "$r$p" ] || { mkdir -p "$r$(dirname "$p")"; cp -L "$p" "$r$p"; }
        done
    done
    mkdir -p "$r/dev" && rm -f "$r/dev/null" && mknod -m 666 "$r/dev/null" c 1 3
    cp -r "$WORK/$2" "$r/pkg"
    mkdir -p "$r/pkg/configmaps"
    case $which in
        gke)
            printf gb200 > "$r/pkg/configmaps/accelerator"
            printf multiNodeTraining > "$r/pkg/configmaps/intent" ;;
        tuned)
            printf h100 > "$r/pkg/configmaps/accelerator"
            printf inference > "$r/pkg/configmaps/intent"
            printf eks > "$r/pkg/configmaps/service"
            ;;
    esac
}

case $which in
    gke)
        PAYLOAD=$(printf '{"type":"service_restart","services":["systemd-sysctl"]}' | base64 -w0)
        RID=gke-0000-1_nvidia_tuning_gke_0.2.0
        STAGES="config config-check interrupt post-interrupt-check config uninstall uninstall-check" ;;
    tuned)
        PAYLOAD=$(printf '{"type":"node_restart"}' | base64 -w0)
        RID=node-0000-1_nvidia_tuned_0.2.3
        STAGES="apply apply-check config config-check interrupt post-interrupt-check config uninstall uninstall-check" ;;
esac

# Milliseconds for every stage of package $1 on a fresh root (root building not counted).
stages() {
    local r=$WORK/root-$1 t0 t1 mode
    node "$r" "$1"
    t0=$(date +%s%N)
    for mode in $STAGES; do
        local extra=()
        [ $mode = interrupt ] && extra=("$PAYLOAD")
        env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            SKYHOOK_RESOURCE_ID=$RID COPY_RESOLV=false \
            SKYHOOK_ROOT_DIR=/state SKYHOOK_LOG_DIR=/log USE_CONTAINERD=false INTERRUPT=true \
            "$AGENT" $mode "$r" /pkg "${extra[@]}" >"$WORK/out-$1-$mode" 2>&1 \
            || echo "$mode" >> "$WORK/failed-$1"
    done
    t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000000 ))
}

if [ "$which" = setup ]; then
    . benches/port_vs_bash_setup.sh
fi

declare -A times
for ((i = 0; i < RUNS; i++)); do
    for p in bash port; do times[$p]+="$(stages $p) "; done
done
python3 - "${times[bash]}" "${times[port]}" <<'PY'
import statistics, sys
b = [int(x) for x in sys.argv[1].split()]
p = [int(x) for x in sys.argv[2].split()]
for name, xs in (("bash", b), ("port", p)):
    print(f"{name}: median {statistics.median(xs):.0f} ms, min {min(xs)} ms, runs {xs}")
print(f"port / bash: {statistics.median(p) / statistics.median(b):.2f} (median)")
PY
for p in bash port; do
    if [ -f "$WORK/failed-$p" ]; then
        echo "$p: stages that failed: $(sort -u "$WORK/failed-$p" | tr '\n' ' ')"
    fi
done
