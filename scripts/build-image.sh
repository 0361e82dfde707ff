#!/usr/bin/env bash
# build-image.sh [OUT] — the agent image as an OCI layout, without a daemon or a registry.
#
#   scripts/build-image.sh                 # -> target/image/oci, tag <version>
#   FORCE=1 scripts/build-image.sh         # rebuild even when the image is up to date
#
# 1. builds the static release binaries (scripts/build-static.sh: LTO, stripped, +crt-static);
# 2. stages them and the machine's CA bundle (Debian's ca-certificates) under target/dist/;
# 3. follows Containerfile — the same file docker buildx uses — with umoci: one layer per COPY
#    (a GNU tar of DST with its parent directories, root-owned, mtime of the commit), then ENV,
#    LABEL and ENTRYPOINT into the image config; FROM scratch only;
# 4. with skopeo installed, also writes OUT/skyhook-agent-<version>.docker.tar (docker-archive,
#    for `docker load` / `podman load` / `ctr images import`).
#
# The image is reused (nothing is built) when OUT/oci/index.json is newer than every input:
# src/, stdlib/, Cargo.toml, Cargo.lock, build.rs, Containerfile and these scripts.
#
# Load it elsewhere: `skopeo copy oci:target/image/oci:0.1.0 docker://REG/skyhook-agent:0.1.0`
# (or docker-archive:...). Prints the image reference (oci:PATH:TAG) on the last line.
# Needs: umoci, GNU tar, file, python3 (Containerfile parsing), cargo.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
out=${1:-target/image}
mkdir -p "$out"
out=$(cd "$out" && pwd -P)

for tool in umoci python3; do
  command -v "$tool" >/dev/null || { echo "$0: $tool is required (apt-get install $tool)" >&2; exit 1; }
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
revision=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [ "$revision" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  revision=$revision-dirty
fi
source=${IMAGE_SOURCE:-$(git remote get-url origin 2>/dev/null || echo unknown)}
case $(uname -m) in
  x86_64) arch=amd64 target=x86_64-unknown-linux-gnu ;;
  aarch64) arch=arm64 target=aarch64-unknown-linux-gnu ;;
  *) echo "$0: unsupported machine $(uname -m)" >&2; exit 1 ;;
esac
tag=$version
layout=$out/oci

inputs=(src stdlib Cargo.toml Cargo.lock Containerfile scripts/build-image.sh scripts/build-static.sh)
[ -e build.rs ] && inputs+=(build.rs)
if [ -z "${FORCE:-}" ] && [ -f "$layout/index.json" ] \
   && [ -z "$(find "${inputs[@]}" -newer "$layout/index.json" -print -quit)" ]; then
  echo "$0: $layout is newer than its inputs, reusing it (FORCE=1 rebuilds)" >&2
  echo "oci:$layout:$tag"
  exit 0
fi

start=$(date +%s)
bin=$(scripts/build-static.sh "$target" | tail -n 1)
built=$(date +%s)

# Stage the build context the Containerfile names.
dist=target/dist
rm -rf "$dist"
mkdir -p "$dist/linux/$arch"
install -m 0755 "$bin/skyhook-agent" "$bin/skyhook-run" "$dist/linux/$arch/"
install -m 0644 "$(readlink -f /etc/ssl/certs/ca-certificates.crt)" "$dist/ca-certificates.crt"
created=$(git log -1 --format=%cI 2>/dev/null || date -u +%Y-%m-%dT%H:%M:%SZ)
touch -d "$created" "$dist/ca-certificates.crt" "$dist/linux/$arch"/*

# Containerfile -> one instruction per line: KIND<TAB>arg<TAB>arg..., build args substituted.
plan=$(python3 - Containerfile "TARGETARCH=$arch" "VERSION=$version" "REVISION=$revision" "SOURCE=$source" <<'PY'
import json, re, shlex, sys
path, given = sys.argv[1], dict(a.split("=", 1) for a in sys.argv[2:])
lines, cur = [], ""
for raw in open(path, encoding="utf-8"):
    s = raw.rstrip("\n")
    if not cur and (not s.strip() or s.lstrip().startswith("#")):
        continue
    if s.endswith("\\"):
        cur += s[:-1] + " "
        continue
    lines.append(cur + s)
    cur = ""
args = {}
def sub(v):
    def one(m):
        name = m.group(1) or m.group(2)
        if name not in args:
            sys.exit(f"{path}: ${{{name}}} is not a declared ARG")
        return args[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, v)
def emit(*f):
    for x in f:
        if "\t" in x or "\n" in x:
            sys.exit(f"{path}: tab or newline in {x!r}")
    print("\t".join(f))
seen_from = False
for line in lines:
    kind, _, rest = line.strip().partition(" ")
    kind, rest = kind.upper(), rest.strip()
    if kind == "FROM":
        if rest != "scratch":
            sys.exit(f"{path}: only FROM scratch is supported here, got {rest!r}")
        seen_from = True
    elif kind == "ARG":
        name, eq, default = rest.partition("=")
        args[name] = given.get(name, default if eq else "")
    elif kind == "COPY":
        parts = shlex.split(rest)
        if len(parts) != 2 or parts[0].startswith("--"):
            sys.exit(f"{path}: COPY takes exactly SRC DST here: {line!r}")
        emit("COPY", sub(parts[0]), sub(parts[1]))
    elif kind in ("ENV", "LABEL"):
        for kv in shlex.split(rest):
            k, eq, v = kv.partition("=")
            if not eq:
                sys.exit(f"{path}: {kind} needs KEY=VALUE: {kv!r}")
            emit(kind, f"{k}={sub(v)}")
    elif kind == "ENTRYPOINT":
        ep = json.loads(rest)
        if not isinstance(ep, list) or not all(isinstance(x, str) for x in ep):
            sys.exit(f"{path}: ENTRYPOINT must be the exec (JSON array) form")
        emit("ENTRYPOINT", *ep)
    else:
        sys.exit(f"{path}: instruction {kind} is not supported by build-image.sh")
    if not seen_from:
        sys.exit(f"{path}: the first instruction must be FROM scratch")
PY
)

tmp=$out/oci.tmp
stage=$out/stage
rm -rf "$tmp" "$stage"
umoci init --layout "$tmp"
umoci new --image "$tmp:$tag"
config=(--architecture "$arch" --os linux --created "$created" --author "scripts/build-image.sh"
        --history.created "$created" --history.created_by "scripts/build-image.sh: ENV, LABEL, ENTRYPOINT")
n=0
while IFS=$'\t' read -r -a f; do
  case ${f[0]} in
    COPY)
      src=${f[1]} dst=${f[2]}
      [ -f "$src" ] || { echo "$0: COPY source $src is missing" >&2; exit 1; }
      [[ $dst == /* ]] || { echo "$0: COPY destination $dst must be absolute" >&2; exit 1; }
      # The layer holds DST's parent directories (0755) as docker's COPY makes them.
      n=$((n + 1))
      top=${dst#/}; top=${top%%/*}
      mkdir -p "$stage/$n$(dirname "$dst")"
      cp -p "$src" "$stage/$n$dst"
      find "$stage/$n" -type d -exec chmod 0755 {} + -exec touch -d "$created" {} +
      # The layer tar is GNU tar's, not `umoci insert`'s: umoci 0.4.7 (Debian 12) writes
      # layers without the final padding and end-of-archive blocks (opencontainers/umoci#436),
      # which GNU tar and layer scanners reject. umoci only compresses and records it.
      tar --create --file "$stage/$n.tar" --format=ustar --numeric-owner --owner=0 --group=0 \
          --mtime="$created" --sort=name -C "$stage/$n" "$top"
      umoci raw add-layer --image "$tmp:$tag" --history.created "$created" \
        --history.created_by "COPY $src $dst" "$stage/$n.tar"
      ;;
    ENV) config+=(--config.env "${f[1]}") ;;
    LABEL) config+=(--config.label "${f[1]}") ;;
    ENTRYPOINT) for a in "${f[@]:1}"; do config+=(--config.entrypoint "$a"); done ;;
  esac
done <<< "$plan"
umoci config --image "$tmp:$tag" "${config[@]}"
umoci gc --layout "$tmp"
rm -rf "$stage" "$layout"
mv "$tmp" "$layout"

if command -v skopeo >/dev/null; then
  skopeo copy --quiet "oci:$layout:$tag" "docker-archive:$out/skyhook-agent-$tag.docker.tar:skyhook-agent:$tag" >&2
fi

size=$(du -sb "$layout/blobs" | cut -f1)
echo "$0: built $layout ($tag, $arch, revision $revision) in $(( $(date +%s) - start ))s" \
     "(binaries $(( built - start ))s); blobs $size bytes" >&2
echo "oci:$layout:$tag"
