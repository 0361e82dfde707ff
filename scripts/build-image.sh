#!/usr/bin/env bash
# build-image.sh [OUT] — the multi-architecture agent image as an OCI layout, with its SBOM and
# provenance, without a daemon or a registry.
#
#   scripts/build-image.sh                        # -> target/image/oci, tag <version>
#   ARCHS=amd64 scripts/build-image.sh            # one architecture only (default: amd64 arm64)
#   FORCE=1 scripts/build-image.sh                # rebuild even when the image is up to date
#   PUSH=REG/REPO scripts/build-image.sh          # then copy it, SBOM and provenance included
#   PREBUILT_arm64=DIR scripts/build-image.sh     # take DIR/skyhook-agent, skyhook-run (and
#                                                 # toolchain.txt) for arm64 instead of building
#
# For each architecture in ARCHS:
#  1. builds the static release binaries (scripts/build-static.sh: LTO, stripped, +crt-static,
#     crate list embedded by cargo-auditable, reproducible);
#  2. stages them and the machine's CA bundle (Debian's ca-certificates) under target/dist/;
#  3. follows Containerfile — the same file docker buildx uses — with umoci: one layer per COPY
#     (a GNU tar of DST with its parent directories, root-owned, mtime of the commit), then
#     ENV, LABEL (org.opencontainers.image.source, revision, version) and ENTRYPOINT into the
#     image config; FROM scratch only. The manifest is tagged <version>-<arch>.
# Then scripts/image-meta.py writes:
#  4. an OCI image index over the per-architecture manifests (platform linux/<arch>), tagged
#     <version>: what `skopeo copy --all` and the kubelet resolve;
#  5. OUT/sbom.cdx.json (CycloneDX: the Cargo.lock crates of the build graph, with licenses and
#     checksums) and OUT/provenance.intoto.json (in-toto Statement, SLSA provenance v1: the
#     binaries' and manifests' digests, commit, Cargo.lock, toolchains, commands), each also
#     attached to the index as an OCI 1.1 referrer (artifact manifest with `subject`), tagged
#     <version>.sbom and <version>.provenance;
#  6. with skopeo installed, OUT/skyhook-agent-<version>.docker.tar (docker-archive of the
#     build machine's architecture, for `docker load` / `podman load` / `ctr images import`).
#
# The image is reused (nothing is built) when OUT/oci/index.json is newer than every input
# (src/, stdlib/, Cargo.toml, Cargo.lock, build.rs, Containerfile, these scripts) and holds
# every architecture of ARCHS.
#
# PUSH=REG/REPO: `skopeo copy --all` of the index to docker://REG/REPO:<version>, then the two
# referrers to REG/REPO:<version>.sbom and :<version>.provenance (a registry with the OCI 1.1
# referrers API lists them under the index's digest). Credentials: skopeo's (`skopeo login`);
# PUSH_FLAGS adds skopeo copy flags (--dest-tls-verify=false for a loopback test registry).
# Prints the image reference (oci:PATH:TAG) on the last line.
# Needs: umoci, GNU tar, file, python3, cargo; arm64 from x86_64: see scripts/build-static.sh.
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

archs=${ARCHS:-amd64 arm64}
tag=$version
layout=$out/oci
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
declare -A targets=([amd64]=x86_64-unknown-linux-gnu [arm64]=aarch64-unknown-linux-gnu)
for arch in $archs; do
  [ -n "${targets[$arch]:-}" ] || { echo "$0: ARCHS: unknown architecture $arch (amd64, arm64)" >&2; exit 1; }
done

inputs=(src stdlib Cargo.toml Cargo.lock Containerfile scripts/build-image.sh scripts/build-static.sh scripts/image-meta.py)
[ -e build.rs ] && inputs+=(build.rs)
fresh=
if [ -z "${FORCE:-}" ] && [ -f "$layout/index.json" ] \
   && [ -z "$(find "${inputs[@]}" -newer "$layout/index.json" -print -quit)" ]; then
  fresh=1
  for arch in $archs; do
    grep -q "\"$tag-$arch\"" "$layout/index.json" || fresh=
  done
fi
if [ -n "$fresh" ]; then
  echo "$0: $layout is newer than its inputs, reusing it (FORCE=1 rebuilds)" >&2
else
# Containerfile -> one instruction per line: KIND<TAB>arg<TAB>arg..., build args substituted.
containerfile_plan() { # ARCH
  python3 - Containerfile "TARGETARCH=$1" "VERSION=$version" "REVISION=$revision" "SOURCE=$source" <<'PY'
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
}

tmp=$out/oci.tmp
stage=$out/stage
dist=target/dist
rm -rf "$tmp" "$stage" "$dist"
mkdir -p "$dist"
install -m 0644 "$(readlink -f /etc/ssl/certs/ca-certificates.crt)" "$dist/ca-certificates.crt"
touch -d "$created" "$dist/ca-certificates.crt"
umoci init --layout "$tmp"
bins=() pairs=() report=()
for arch in $archs; do
  start=$(date +%s)
  prebuilt=PREBUILT_$arch
  if [ -n "${!prebuilt:-}" ]; then
    bin=$(cd "${!prebuilt}" && pwd -P)
    echo "$0: $arch: using the binaries in $bin ($prebuilt), not building them" >&2
  else
    bin=$(scripts/build-static.sh "${targets[$arch]}" | tail -n 1)
  fi
  bins+=("$arch:$bin")
  # Stage the build context the Containerfile names.
  mkdir -p "$dist/linux/$arch"
  install -m 0755 "$bin/skyhook-agent" "$bin/skyhook-run" "$dist/linux/$arch/"
  touch -d "$created" "$dist/linux/$arch"/*
  plan=$(containerfile_plan "$arch")

  ref=$tmp:$tag-$arch
  umoci new --image "$ref"
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
        rm -rf "$stage/$n"
        mkdir -p "$stage/$n$(dirname "$dst")"
        cp -p "$src" "$stage/$n$dst"
        find "$stage/$n" -type d -exec chmod 0755 {} + -exec touch -d "$created" {} +
        # The layer tar is GNU tar's, not `umoci insert`'s: umoci 0.4.7 (Debian 12) writes
        # layers without the final padding and end-of-archive blocks (opencontainers/umoci#436),
        # which GNU tar and layer scanners reject. umoci only compresses and records it.
        tar --create --file "$stage/$n.tar" --format=ustar --numeric-owner --owner=0 --group=0 \
            --mtime="$created" --sort=name -C "$stage/$n" "$top"
        umoci raw add-layer --image "$ref" --history.created "$created" \
          --history.created_by "COPY $src $dst" "$stage/$n.tar"
        ;;
      ENV) config+=(--config.env "${f[1]}") ;;
      LABEL) config+=(--config.label "${f[1]}") ;;
      ENTRYPOINT) for a in "${f[@]:1}"; do config+=(--config.entrypoint "$a"); done ;;
    esac
  done <<< "$plan"
  umoci config --image "$ref" "${config[@]}"
  pairs+=("$arch=$tag-$arch")
  report+=("$arch: $(( $(date +%s) - start ))s")
done
umoci gc --layout "$tmp"
rm -rf "$stage"

# The index, the SBOM and the provenance (scripts/image-meta.py).
sbom_targets=()
for arch in $archs; do sbom_targets+=("${targets[$arch]}"); done
ANNOTATE_ORG_OPENCONTAINERS_IMAGE_VERSION=$version \
ANNOTATE_ORG_OPENCONTAINERS_IMAGE_REVISION=$revision \
ANNOTATE_ORG_OPENCONTAINERS_IMAGE_SOURCE=$source \
ANNOTATE_ORG_OPENCONTAINERS_IMAGE_CREATED=$created \
  python3 scripts/image-meta.py index "$tmp" "$tag" "${pairs[@]}" >/dev/null
python3 scripts/image-meta.py sbom "${sbom_targets[@]}" > "$out/sbom.cdx.json"
python3 scripts/image-meta.py attach "$tmp" "$tag" "$out/sbom.cdx.json" \
  application/vnd.cyclonedx+json "$tag.sbom" >/dev/null
IMAGE_SOURCE=$source python3 scripts/image-meta.py provenance "$tmp" "$tag" "${bins[@]}" \
  > "$out/provenance.intoto.json"
python3 scripts/image-meta.py attach "$tmp" "$tag" "$out/provenance.intoto.json" \
  application/vnd.in-toto+json "$tag.provenance" >/dev/null
rm -rf "$layout"
mv "$tmp" "$layout"

host=$(case $(uname -m) in aarch64) echo arm64 ;; *) echo amd64 ;; esac)
if command -v skopeo >/dev/null && [[ " $archs " == *" $host "* ]]; then
  skopeo copy --quiet "oci:$layout:$tag-$host" "docker-archive:$out/skyhook-agent-$tag.docker.tar:skyhook-agent:$tag" >&2
fi
size=$(du -sb "$layout/blobs" | cut -f1)
echo "$0: built $layout ($tag: $archs, revision $revision; ${report[*]}); blobs $size bytes" >&2
fi

if [ -n "${PUSH:-}" ]; then
  command -v skopeo >/dev/null || { echo "$0: PUSH needs skopeo (apt-get install skopeo)" >&2; exit 1; }
  # PUSH_FLAGS: more skopeo copy flags, e.g. --dest-tls-verify=false for a test registry.
  # shellcheck disable=SC2086
  skopeo copy ${PUSH_FLAGS:-} --all --preserve-digests "oci:$layout:$tag" "docker://$PUSH:$tag" >&2
  for a in sbom provenance; do
    # shellcheck disable=SC2086
    skopeo copy ${PUSH_FLAGS:-} --preserve-digests "oci:$layout:$tag.$a" "docker://$PUSH:$tag.$a" >&2
  done
  echo "$0: pushed $PUSH:$tag (and :$tag.sbom, :$tag.provenance)" >&2
fi
echo "oci:$layout:$tag"
