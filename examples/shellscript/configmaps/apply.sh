#!/bin/bash
set -euo pipefail
echo "installing /etc/motd.d/10-skyhook"
mkdir -p /etc/motd.d
echo "${MOTD_TEXT:-Managed by Skyhook}" > /etc/motd.d/10-skyhook
