#!/usr/bin/env bash
# build-static.sh [TARGET] — statically linked, reproducible release binaries of skyhook-agent
# and skyhook-run, with their crate list embedded.
#
# TARGET: x86_64-unknown-linux-gnu (default) or aarch64-unknown-linux-gnu. The release profile
# (Cargo.toml) does LTO, one codegen unit and strips symbols; this script adds
# `-C target-feature=+crt-static` (glibc linked in: the agent resolves users and groups from
# the host root's files, never through NSS, so a static glibc loses nothing it uses).
#
# Toolchain: `cargo` on PATH when its rustc has the target's std; otherwise Debian's
# /usr/bin/cargo and /usr/bin/rustc (apt-get install rustc-web cargo-web
# libstd-rust-web-dev:arm64 after `dpkg --add-architecture arm64`). Cross-linking to aarch64
# uses aarch64-linux-gnu-gcc (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross) unless
# CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER / CC_aarch64_unknown_linux_gnu say otherwise.
#
# Crate list: with cargo-auditable installed (`cargo install cargo-auditable --locked`), the
# build is `cargo auditable build`, which links the Cargo.lock crates of the build graph into
# a `.dep-v0` section (zlib-compressed JSON) that syft, trivy and `cargo audit bin` read.
# AUDITABLE=required fails without it (.ci/run sets it); AUDITABLE=0 skips it.
#
# Reproducible: the checkout, cargo home and target dir paths are remapped (--remap-path-prefix)
# to /build/skyhook, /cargo and /build/skyhook/target, and SOURCE_DATE_EPOCH is the commit time (build.rs reads it for
# --version), so two builds of one commit give the same bytes (scripts/check-reproducible.sh).
#
# RUSTFLAGS with an explicit --target applies to the target artifacts only (build scripts and
# proc macros stay dynamic host binaries), and the output goes to target/TARGET/release/, so
# `cargo build`, `cargo test` and a plain `cargo build --release` are not affected.
#
# Prints the directory holding the two binaries on the last line of stdout; writes the
# toolchain used (`rustc -vV`, `cargo -V`, linker) to that directory's toolchain.txt for the
# provenance. Fails when the result is not a static executable.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
target=${1:-x86_64-unknown-linux-gnu}
case $target in
  x86_64-unknown-linux-gnu | aarch64-unknown-linux-gnu) ;;
  *) echo "$0: unsupported target $target (x86_64-unknown-linux-gnu or aarch64-unknown-linux-gnu)" >&2; exit 1 ;;
esac

has_std() { # RUSTC: whether its sysroot has the target's std
  local dir
  dir=$("$1" --print target-libdir --target "$target" 2>/dev/null) || return 1
  compgen -G "$dir/libstd-*.rlib" >/dev/null
}
cargo=${CARGO:-cargo} rustc=${RUSTC:-rustc}
if ! has_std "$rustc"; then
  if [ -x /usr/bin/rustc ] && [ -x /usr/bin/cargo ] && has_std /usr/bin/rustc; then
    cargo=/usr/bin/cargo rustc=/usr/bin/rustc
  else
    echo "$0: no Rust standard library for $target: neither $rustc nor /usr/bin/rustc has it" \
         "(Debian: dpkg --add-architecture arm64 && apt-get update && apt-get install rustc-web" \
         "cargo-web libstd-rust-web-dev:arm64 gcc-aarch64-linux-gnu libc6-dev-arm64-cross)" >&2
    exit 1
  fi
fi
export RUSTC=$rustc
if [ "$target" = aarch64-unknown-linux-gnu ] && [ "$(uname -m)" != aarch64 ]; then
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER:-aarch64-linux-gnu-gcc}
  export CC_aarch64_unknown_linux_gnu=${CC_aarch64_unknown_linux_gnu:-aarch64-linux-gnu-gcc}
  command -v "$CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER" >/dev/null || {
    echo "$0: linker $CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER not found (apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)" >&2
    exit 1
  }
fi

# PROFILE=dev: unoptimised binaries in minutes instead of LTO ones, to try the image scripts
# and tests; never shipped.
profile=${PROFILE:-release}
build=(build)
case ${AUDITABLE:-auto} in
  0) ;;
  *)
    if command -v cargo-auditable >/dev/null; then
      build=(auditable build)
    elif [ "${AUDITABLE:-auto}" = required ]; then
      echo "$0: cargo-auditable is not installed (cargo install cargo-auditable --locked)" >&2
      exit 1
    else
      echo "$0: WARNING: cargo-auditable is not installed: no crate list in the binaries" >&2
    fi
    ;;
esac

cargo_home=${CARGO_HOME:-$HOME/.cargo}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
remap="--remap-path-prefix=$repo=/build/skyhook --remap-path-prefix=$cargo_home=/cargo"
# A target dir outside the checkout (build scripts' OUT_DIR) maps where the default one does.
if [ -n "${CARGO_TARGET_DIR:-}" ] && [[ $(realpath -m "$CARGO_TARGET_DIR") != "$repo"/* ]]; then
  remap+=" --remap-path-prefix=$(realpath -m "$CARGO_TARGET_DIR")=/build/skyhook/target"
fi
RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static $remap" \
  "$cargo" "${build[@]}" --locked --profile "$profile" --target "$target" --bins >&2

out=${CARGO_TARGET_DIR:-$PWD/target}/$target/$([ "$profile" = dev ] && echo debug || echo "$profile")
for b in skyhook-agent skyhook-run; do
  desc=$(file -b "$out/$b" 2>/dev/null || true)
  case $desc in
    *"statically linked"* | *"static-pie linked"*) ;;
    "") ;; # no file(1): skip the check
    *) echo "$0: $out/$b is not statically linked: $desc" >&2; exit 1 ;;
  esac
done
{
  "$rustc" -vV
  echo "cargo: $("$cargo" -V)"
  if [ "${build[0]}" = auditable ]; then
    echo "cargo-auditable: $("$cargo" install --list | sed -n 's/^cargo-auditable \(v[^:]*\):$/\1/p')"
  fi
  linker=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER:-cc}
  [ "$target" = x86_64-unknown-linux-gnu ] && linker=cc
  echo "linker: $linker: $("$linker" --version | head -n 1)"
  echo "SOURCE_DATE_EPOCH: $SOURCE_DATE_EPOCH"
} > "$out/toolchain.txt"
echo "$out"
