#!/bin/bash
rm -f /etc/motd.d/10-skyhook
