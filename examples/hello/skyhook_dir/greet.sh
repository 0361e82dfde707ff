#!/bin/bash
# apply: write /etc/hello/greeting from the package's configMap and the node name argument.
set -euo pipefail
greeting=$(cat "$SKYHOOK_DIR/configmaps/greeting.conf")
echo "writing /etc/hello/greeting for node $1"
printf '%s, %s!\n' "$greeting" "$1" > /etc/hello/greeting
echo "done" >&2
