#!/bin/bash
test ! -e /etc/hello/greeting
