#!/bin/bash
set -euo pipefail
rm -f /etc/hello/greeting /etc/hello/motd
echo "removed /etc/hello"
