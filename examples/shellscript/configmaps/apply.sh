#!/bin/bash
set -euo pipefail
echo "installing /etc/motd.d/10-skyhook"
mkdir -p /etc/motd.d
echo "Managed by Skyhook" > /etc/motd.d/10-skyhook
