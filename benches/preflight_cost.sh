#!/bin/bash
# preflight_cost.sh — what the agent's preflight (validate, then plan) costs against the run it
# precedes, for examples/tuning and the three GPU ports, and what a planned file change costs
# against an applied one (issue 31: the preflight ≤ 10 % of the apply; a planned change ≤ 1.5×
# an applied one, in instructions). As root (the agent chroots).
#
#   sudo [RUNS=5] [BIN=target/release] [BASE=dir] bash benches/preflight_cost.sh share
#   sudo [BIN=target/debug] [BASE=dir] [SIZES="10 100"] [KINDS="write line"] bash benches/preflight_cost.sh ir
#
# `share`: for each case below, RUNS rounds, each on a fresh node: `skyhook-agent MODE` of the
# package with SKYHOOK_LOG=skyhook=info. The preflight's figures come from its log line
# ("preflight ... total_us=... query_us=... cpu_us=... query_cpu_us=..."; cpu_us, the process's
# user + system time over the preflight with its queries', is logged since issue 31,
# query_cpu_us, the queries' part, since its fourth round, query_us, the wall time the queries
# took from spawn to reap, since its sixth: older builds print "-"); the run's from getrusage
# of the agent's process (wall, and user + system of the agent and the commands its steps
# ran). Printed per case: the medians, and the preflight's share of the rest of the run,
# pf / (run - pf), in wall and in CPU; the wall share split into its queries' part (the same
# commands the apply runs, the fake hosts' shell stubs) and the agent's own. The cases (fresh node per round, built as benches/port_vs_bash.sh builds its nodes):
#   tuning apply|config  examples/tuning on scripts/make-host-root.sh (its recording stubs, the
#                        four /proc/sys keys, an update-grub stub)
#   gke config           examples/nvidia-tuning-gke on tests/fakehosts/cos-117 (gb200,
#                        multiNodeTraining, USE_CONTAINERD=false)
#   tuned apply|config   examples/nvidia-tuned on ubuntu-24.04-eks-x86_64 (h100, inference, eks;
#                        config after an untimed apply, which installs tuned)
#   setup apply          examples/nvidia-setup on ubuntu-24.04-eks-x86_64 (eks, h100; the EFA
#                        installer from a 127.0.0.1 mirror, as benches/port_vs_bash_setup.sh;
#                        without the instance-store disks, so no RAID0: the fake mdadm makes
#                        no block device)
# Commands are the fake hosts' stubs, so a node's apply is longer and these shares are upper
# bounds. CPU time is the reading to trust on a shared machine. With BASE (a directory holding
# another build's skyhook-agent, e.g. main's), each round runs BASE's and BIN's alternately on
# identical nodes.
#
# `ir`: instructions (callgrind) per planned and per applied file change: a package whose one
# `config` step makes N changes of one kind (`write`: N fs::write of new files in one
# directory; `line`: N fs::ensure_line of one file), run by `skyhook-agent config` under
# callgrind with a dump when the preflight's plan starts (Preflight::plan) and one when the
# package lock is taken after it (prepare::package_lock): the second part is the plan, the
# third the apply. Per change = (part at N2 - part at N1) / (N2 - N1) for SIZES="N1 N2".
# `node PKG DIR` only builds the fresh node of PKG (tuning, gke, tuned, setup) at DIR, the
# package at /pkg, for profiling a run by hand (the setup case's EFA mirror is not started).
#
# Needs a build with symbols (the debug build; the release one is stripped). valgrind lacks
# openat2, so root-confined lookups (pathrs) cost far more under it than natively
# (docs/benchmarks.md): both sides pay that, the apply more (it resolves every change anew).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "preflight_cost.sh: needs root (steps run in a chroot)" >&2; exit 1; }
what=${1:-share}
W=$(mktemp -d /tmp/preflight-cost.XXXXXX)
MIRROR_PID=
cleanup() {
    if [ -n "$MIRROR_PID" ]; then kill "$MIRROR_PID" 2>/dev/null || true; fi
    if [ -z "${KEEP:-}" ]; then rm -rf "$W"; else echo "kept $W" >&2; fi
}
trap cleanup EXIT
PATHS=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# Runs argv[2:], writes "wall user sys" (seconds) of it and its children to argv[1]. The
# children's time is taken net of what this process's children had used before the call: a
# launcher (pyenv's `python3` shim is a shell script) leaves its own helpers' time there,
# 60 ms here, which counted as the run's before issue 31's second round.
TIMER='import resource, subprocess, sys, time
b = resource.getrusage(resource.RUSAGE_CHILDREN)
t = time.monotonic()
rc = subprocess.call(sys.argv[2:])
w = time.monotonic() - t
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write("%f %f %f\n" % (w, u.ru_utime - b.ru_utime, u.ru_stime - b.ru_stime))
sys.exit(rc)'

median() { sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]; else print "-"}'; }

# ---- ir ----------------------------------------------------------------------------------

# A package at $1 whose config step makes $2 changes of kind $3 (write|line).
ir_package() {
    local d=$1 n=$2 kind=$3 i
    mkdir -p "$d/skyhook_dir"
    cat > "$d/config.json" <<'J'
{"schema_version": "v1", "root_dir": "/", "expected_config_files": [],
 "package_name": "pfbench", "package_version": "1.0.0",
 "modes": {
  "config": [{"name": "w", "path": "w.rhai", "arguments": [], "returncodes": [0],
              "on_host": true, "idempotence": true, "upgrade_step": false}],
  "config-check": [{"name": "c", "path": "c.rhai", "arguments": [], "returncodes": [0],
                    "on_host": true, "idempotence": true, "upgrade_step": false}]}}
J
    echo 'let x = 1;' > "$d/skyhook_dir/c.rhai"
    {
        echo 'fs::mkdir("/etc/pfb");'
        for i in $(seq "$n"); do
            case $kind in
                write) echo "fs::write(\"/etc/pfb/f$i.conf\", \"key$i = value $i\\nother = $i\\n\");" ;;
                line) echo "fs::ensure_line(\"/etc/pfb/lines.conf\", \"key$i = value $i\");" ;;
            esac
        done
    } > "$d/skyhook_dir/w.rhai"
}

# Ir of the three parts (start + check, plan, apply) of `AGENT config` for N changes of KIND.
ir_parts() {
    local agent=$1 n=$2 kind=$3 r=$W/ir-root out=$W/cg f
    rm -rf "$r" "$out"*
    cp -a "$W/ir-template" "$r"
    ir_package "$r/var/lib/skyhook/pfb" "$n" "$kind"
    env -i PATH=$PATHS COPY_RESOLV=false SKYHOOK_RESOURCE_ID=b-1_pfbench_1.0.0 \
        valgrind --tool=callgrind --callgrind-out-file="$out" \
        --dump-before='skyhook::agent::mode::preflight::Preflight::plan' \
        --dump-before='skyhook::agent::prepare::package_lock' \
        "$agent" config "$r" /var/lib/skyhook/pfb > "$W/ir-log" 2>&1 \
        || { echo "preflight_cost.sh: $agent config failed:" >&2; tail -5 "$W/ir-log" >&2; exit 1; }
    for f in "$out.1" "$out.2" "$out"; do
        [ -f "$f" ] || { echo "preflight_cost.sh: no dump $f (a build without symbols?)" >&2; exit 1; }
        sed -n 's/^summary: //p' "$f"
    done | tr '\n' ' '
}

ir() {
    local sizes=(${SIZES:-10 100}) bins=() b kind lo hi
    [ -n "${BASE:-}" ] && bins+=("base=$BASE")
    bins+=("this=${BIN:-target/debug}")
    scripts/make-host-root.sh "$W/ir-template" > /dev/null
    echo "callgrind Ir per file change, (N=${sizes[1]} - N=${sizes[0]}) / $((sizes[1] - sizes[0]))"
    printf '%-6s %-6s %14s %14s %8s\n' build kind plan apply plan/apply
    for kind in ${KINDS:-write line}; do
        for b in "${bins[@]}"; do
            read -r _ p1 a1 <<< "$(ir_parts "${b#*=}/skyhook-agent" "${sizes[0]}" $kind)"
            read -r _ p2 a2 <<< "$(ir_parts "${b#*=}/skyhook-agent" "${sizes[1]}" $kind)"
            awk -v b="${b%%=*}" -v k=$kind -v p1="$p1" -v p2="$p2" -v a1="$a1" -v a2="$a2" \
                -v d=$((sizes[1] - sizes[0])) 'BEGIN {
                p = (p2 - p1) / d; a = (a2 - a1) / d
                printf "%-6s %-6s %14.0f %14.0f %8.2f\n", b, k, p, a, p / a }'
        done
    done
}

# ---- share -------------------------------------------------------------------------------

# The tools the fake hosts' stubs use, with their libraries, into root $1.
copy_tools() {
    local r=$1 t p f
    for t in find xargs mktemp tee readlink awk; do
        p=$(command -v $t) || continue
        for f in "$p" $(ldd "$p" 2>/dev/null | grep -o '/[^ ]*'); do
            f=$(readlink -f "$f")
            [ -e "$r$f" ] || { mkdir -p "$r$(dirname "$f")"; cp "$f" "$r$f"; }
        done
        [ -e "$r$p" ] || { mkdir -p "$r$(dirname "$p")"; cp "$p" "$r$p"; }
    done
}

# A fresh node at $1 for package $2 (tuning|gke|tuned|setup) with the package at /pkg.
node() {
    local r=$1 pkg=$2 host f n d k
    rm -rf "$r"
    scripts/make-host-root.sh "$r" > /dev/null
    case $pkg in
        tuning)
            for k in net/core/rmem_max net/core/wmem_max fs/inotify/max_user_instances vm/max_map_count; do
                mkdir -p "$r/proc/sys/$(dirname "$k")"
                echo 100 > "$r/proc/sys/$k"
            done
            mkdir -p "$r/etc/default/grub.d"
            sed 's/systemctl/update-grub/' "$r/usr/local/bin/systemctl" > "$r/usr/local/bin/update-grub"
            chmod 755 "$r/usr/local/bin/update-grub"
            cp -r examples/tuning "$r/pkg"
            return ;;
        gke) host=cos-117 ;;
        tuned | setup) host=ubuntu-24.04-eks-x86_64 ;;
    esac
    rm -f "$r"/usr/local/bin/{systemctl,sysctl,service,reboot}
    cp -a "tests/fakehosts/$host/." "$r/"
    # The layer's links its snapshot flattened into files holding the target, links again.
    for f in "$r"/usr/local/bin/{apt-get,yum} "$r"/proc/sys/kernel/{osrelease,arch} "$r"/dev/disk/by-id/*; do
        [ -f "$f" ] && [ ! -x "$f" ] && ln -sfn "$(cat "$f")" "$f"
    done
    copy_tools "$r"
    mkdir -p "$r/dev" && rm -f "$r/dev/null" && mknod -m 666 "$r/dev/null" c 1 3
    mkdir -p "$r/pkg/configmaps"
    case $pkg in
        gke)
            cp -r examples/nvidia-tuning-gke/. "$r/pkg"
            printf gb200 > "$r/pkg/configmaps/accelerator"
            printf multiNodeTraining > "$r/pkg/configmaps/intent" ;;
        tuned)
            cp -r examples/nvidia-tuned/. "$r/pkg"
            printf h100 > "$r/pkg/configmaps/accelerator"
            printf inference > "$r/pkg/configmaps/intent"
            printf eks > "$r/pkg/configmaps/service" ;;
        setup)
            cp -r examples/nvidia-setup/. "$r/pkg"
            printf eks > "$r/pkg/configmaps/service"
            printf h100 > "$r/pkg/configmaps/accelerator"
            # No instance-store disks: the layer's are plain files, on which the fake mdadm
            # makes no block device, so the RAID0 part is skipped (its plan and apply alike).
            rm -f "$r"/dev/disk/by-id/*NVMe_Instance_Storage_* "$r"/dev/nvme?n1 ;;
    esac
}

# The EFA installer mirror of the setup case (benches/port_vs_bash_setup.sh): sets EFA_URL.
start_mirror() {
    local efa=aws-efa-installer-1.47.0.tar.gz host=ubuntu-24.04-eks-x86_64
    mkdir -p "$W/mirror" "$W/efa"
    (cd "$W/efa" && sh "$OLDPWD/tests/fakehosts/$host/usr/share/fakehost/mirror/$efa")
    tar -C "$W/efa" -czf "$W/mirror/$efa" aws-efa-installer
    python3 - "$W/mirror" "$W/mirror.port" <<'PY' &
import functools, http.server, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=sys.argv[1]))
open(sys.argv[2], "w").write(str(srv.server_address[1]))
srv.serve_forever()
PY
    MIRROR_PID=$!
    for _ in $(seq 50); do [ -s "$W/mirror.port" ] && break; sleep 0.1; done
    [ -s "$W/mirror.port" ] || { echo "preflight_cost.sh: the mirror did not start" >&2; exit 1; }
    EFA_URL=http://127.0.0.1:$(cat "$W/mirror.port")/$efa
}

# One run of `AGENT MODE` on node $3 for package $4: appends "pf_us pf_cpu_us wall_us cpu_us
# pf_query_cpu_us pf_query_us" to $5 (the last two "-" for builds that do not log them).
one() {
    local agent=$1 mode=$2 r=$3 pkg=$4 out=$5 rid pf pfc pfq
    case $pkg in
        tuning) rid=bench-1_tuning_2.0.0 ;;
        gke) rid=gke-0000-1_nvidia_tuning_gke_0.2.0 ;;
        tuned) rid=node-0000-1_nvidia_tuned_0.2.3 ;;
        setup) rid=setup-0000-1_nvidia_setup_0.2.1 ;;
    esac
    python3 -c "$TIMER" "$W/time" env -i PATH=$PATHS SKYHOOK_LOG=skyhook=info \
        SKYHOOK_RESOURCE_ID=$rid COPY_RESOLV=false SKYHOOK_ROOT_DIR=/state SKYHOOK_LOG_DIR=/log \
        USE_CONTAINERD=false INTERRUPT=true NVIDIA_EFA_URL="${EFA_URL:-}" \
        "$agent" "$mode" "$r" /pkg > "$W/log" 2>&1 \
        || { echo "preflight_cost.sh: $pkg $mode failed with $agent:" >&2; tail -5 "$W/log" >&2; exit 1; }
    pf=$(sed -n 's/.*preflight.*total_us=\([0-9]*\).*/\1/p' "$W/log" | head -1)
    pfc=$(sed -n 's/.*preflight.* cpu_us=\([0-9]*\).*/\1/p' "$W/log" | head -1)
    pfq=$(sed -n 's/.*preflight.* query_cpu_us=\([0-9]*\).*/\1/p' "$W/log" | head -1)
    pfw=$(sed -n 's/.*preflight.* query_us=\([0-9]*\).*/\1/p' "$W/log" | head -1)
    [ -n "$pf" ] || { echo "preflight_cost.sh: no preflight log line ($pkg $mode)" >&2; exit 1; }
    awk -v pf="$pf" -v pfc="${pfc:--}" -v pfq="${pfq:--}" -v pfw="${pfw:--}" \
        '{ printf "%s %s %.0f %.0f %s %s\n", pf, pfc, $1 * 1e6, ($2 + $3) * 1e6, pfq, pfw }' \
        "$W/time" >> "$out"
}

share() {
    local runs=${RUNS:-5} bins=() b c pkg mode i f
    [ -n "${BASE:-}" ] && bins+=("base=$BASE")
    bins+=("this=${BIN:-target/release}")
    start_mirror
    local cases=${CASES:-"tuning:apply tuning:config gke:config tuned:apply tuned:config setup:apply"}
    for c in $cases; do
        pkg=${c%%:*} mode=${c#*:}
        for i in $(seq "$runs"); do
            for b in "${bins[@]}"; do
                node "$W/root" "$pkg"
                # nvidia-tuned's config needs what its apply installs (tuned): applied first,
                # untimed.
                [ "$c" = tuned:config ] && one "${b#*=}/skyhook-agent" apply "$W/root" "$pkg" "$W/discard"
                one "${b#*=}/skyhook-agent" "$mode" "$W/root" "$pkg" "$W/res-${b%%=*}-$pkg-$mode"
            done
        done
    done
    echo "preflight against the rest of the run: medians of $runs runs (ms; CPU = user + sys)"
    echo "  q_wall, q_cpu: the preflight's queries (the commands its plan ran), wall and CPU;"
    echo "  wall_%: pf_wall / (run_wall - pf_wall); q_% and own_%: its queries' and its own part of that"
    printf '%-7s %-14s %8s %8s %8s %8s %9s %9s %7s %7s %7s %7s\n' build case pf_wall q_wall pf_cpu q_cpu \
        run_wall run_cpu wall_% q_% own_% cpu_%
    for c in $cases; do
        for b in "${bins[@]}"; do
            f=$W/res-${b%%=*}-${c%%:*}-${c#*:}
            local pf pfc pfq pfw wall cpu
            pf=$(cut -d' ' -f1 "$f" | median); pfc=$(cut -d' ' -f2 "$f" | { grep -v -- - || true; } | median)
            pfq=$(cut -d' ' -f5 "$f" | { grep -v -- - || true; } | median)
            pfw=$(cut -d' ' -f6 "$f" | { grep -v -- - || true; } | median)
            wall=$(cut -d' ' -f3 "$f" | median); cpu=$(cut -d' ' -f4 "$f" | median)
            awk -v b="${b%%=*}" -v c="$c" -v pf="$pf" -v pfc="$pfc" -v pfq="$pfq" -v pfw="$pfw" \
                -v w="$wall" -v u="$cpu" 'BEGIN {
                cpu_pf = (pfc == "-") ? "-" : sprintf("%.1f", pfc / 1000)
                cpu_q = (pfq == "-") ? "-" : sprintf("%.1f", pfq / 1000)
                q_wall = (pfw == "-") ? "-" : sprintf("%.1f", pfw / 1000)
                q_share = (pfw == "-") ? "-" : sprintf("%.1f", 100 * pfw / (w - pf))
                own_share = (pfw == "-") ? "-" : sprintf("%.1f", 100 * (pf - pfw) / (w - pf))
                cpu_share = (pfc == "-") ? "-" : sprintf("%.1f", 100 * pfc / (u - pfc))
                printf "%-7s %-14s %8.1f %8s %8s %8s %9.1f %9.1f %7.1f %7s %7s %7s\n", b, c, pf / 1000,
                    q_wall, cpu_pf, cpu_q, w / 1000, u / 1000, 100 * pf / (w - pf), q_share, own_share,
                    cpu_share }'
        done
    done
}

# `irshare`: per case of `share` (one run each on a fresh node), the agent's own instructions
# (callgrind, commands not traced) in its preflight (from Preflight::run to the package lock)
# against the rest of the run, BASE's and BIN's (builds with symbols).
irshare() {
    local bins=() b c pkg mode out
    [ -n "${BASE:-}" ] && bins+=("base=$BASE")
    bins+=("this=${BIN:-target/debug}")
    start_mirror
    printf '%-6s %-14s %14s %14s %8s\n' build case preflight rest share_%
    for c in ${CASES:-tuning:apply tuning:config gke:config tuned:apply tuned:config setup:apply}; do
        pkg=${c%%:*} mode=${c#*:}
        for b in "${bins[@]}"; do
            node "$W/root" "$pkg"
            [ "$c" = tuned:config ] && one "${b#*=}/skyhook-agent" apply "$W/root" "$pkg" "$W/discard"
            out=$W/cg-share; rm -f "$out"*
            env -i PATH=$PATHS SKYHOOK_RESOURCE_ID=x-1_p_1 COPY_RESOLV=false SKYHOOK_ROOT_DIR=/state \
                SKYHOOK_LOG_DIR=/log USE_CONTAINERD=false INTERRUPT=true NVIDIA_EFA_URL="${EFA_URL:-}" \
                valgrind --tool=callgrind --callgrind-out-file="$out" \
                --dump-before='skyhook::agent::mode::preflight::Preflight::run' \
                --dump-before='skyhook::agent::prepare::package_lock' \
                "${b#*=}/skyhook-agent" "$mode" "$W/root" /pkg > "$W/log" 2>&1 \
                || { echo "preflight_cost.sh: $c failed under callgrind:" >&2; tail -3 "$W/log" >&2; exit 1; }
            for f in "$out.1" "$out.2" "$out"; do sed -n 's/^summary: //p' "$f"; done | tr '\n' ' ' |
                awk -v b="${b%%=*}" -v c="$c" '{ printf "%-6s %-14s %14d %14d %8.1f\n", b, c, $2, $1 + $3, 100 * $2 / ($1 + $3) }'
        done
    done
}

case $what in
    share) share ;;
    irshare) irshare ;;
    ir) ir ;;
    node) node "$3" "$2" ;;
    *) echo "usage: preflight_cost.sh share|ir|irshare|node PKG DIR (see its header)" >&2; exit 2 ;;
esac
