#!/bin/bash
# apply-check: the greeting exists and matches the configMap.
set -euo pipefail
greeting=$(cat "$SKYHOOK_DIR/configmaps/greeting.conf")
grep -q "^$greeting, " /etc/hello/greeting
echo "greeting ok: $(cat /etc/hello/greeting)"
