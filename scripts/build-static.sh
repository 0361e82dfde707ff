#!/usr/bin/env bash
# build-static.sh [TARGET] — statically linked release binaries of skyhook-agent and skyhook-run.
#
# TARGET defaults to x86_64-unknown-linux-gnu. The release profile (Cargo.toml) does LTO, one
# codegen unit and strips symbols; this script adds `-C target-feature=+crt-static` (glibc
# linked in: the agent resolves users and groups from the host root's files, never through
# NSS, so a static glibc loses nothing it uses).
#
# RUSTFLAGS with an explicit --target applies to the target artifacts only (build scripts and
# proc macros stay dynamic host binaries), and the output goes to target/TARGET/release/, so
# `cargo build`, `cargo test` and a plain `cargo build --release` are not affected.
#
# Prints the directory holding the two binaries on the last line of stdout. Fails when the
# result is not a static executable.
#
# arm64 from an x86_64 machine (not exercised here):
#   apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross
#   rustup target add aarch64-unknown-linux-gnu
#   CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
#     scripts/build-static.sh aarch64-unknown-linux-gnu
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-x86_64-unknown-linux-gnu}

RUSTFLAGS="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static" \
  cargo build --locked --release --target "$target" --bins >&2

out=${CARGO_TARGET_DIR:-$PWD/target}/$target/release
for b in skyhook-agent skyhook-run; do
  desc=$(file -b "$out/$b" 2>/dev/null || true)
  case $desc in
    *"statically linked"* | *"static-pie linked"*) ;;
    "") ;; # no file(1): skip the check
    *) echo "$0: $out/$b is not statically linked: $desc" >&2; exit 1 ;;
  esac
done
echo "$out"
