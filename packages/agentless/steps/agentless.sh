#!/bin/sh
# Upstream NodeWright's agentless test image, as a package: sleep SLEEP_LEN seconds,
# then exit with EXIT_CODE. Both come from the package's env (the resource's
# spec.packages.<name>.env); each stage's name ($1) is logged so a run report shows
# which stages ran.
set -u
sleep_len=${SLEEP_LEN:-0}
exit_code=${EXIT_CODE:-0}
case "$sleep_len" in ''|*[!0-9]*) echo "agentless: SLEEP_LEN must be whole seconds, got '$sleep_len'" >&2; exit 2 ;; esac
case "$exit_code" in ''|*[!0-9]*) echo "agentless: EXIT_CODE must be a number, got '$exit_code'" >&2; exit 2 ;; esac
echo "agentless [$*] sleep for ${sleep_len} and exit with ${exit_code}"
sleep "$sleep_len"
exit "$exit_code"
