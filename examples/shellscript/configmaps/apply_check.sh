#!/bin/bash
grep -qx "Managed by Skyhook" /etc/motd.d/10-skyhook
