#!/bin/bash
test ! -e /etc/motd.d/10-skyhook
