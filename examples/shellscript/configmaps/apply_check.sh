#!/bin/bash
grep -qxF "${MOTD_TEXT:-Managed by Skyhook}" /etc/motd.d/10-skyhook
