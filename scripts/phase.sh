#!/usr/bin/env bash
# Usage: phase.sh NAME COMMAND...: runs COMMAND and prints how long the
# phase NAME took (`make test` and `make lint` time each phase this way;
# docs/testing.md lists them). Exits with COMMAND's status.
name=$1
shift
start=$(date +%s)
"$@"
rc=$?
printf 'phase %-10s %4ds  (rc %d)\n' "$name" "$(($(date +%s) - start))" "$rc" >&2
exit "$rc"
