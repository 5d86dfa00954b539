#!/bin/sh
# Run the script the package config supplies for this stage ($1). The runner names
# it in NODEWRIGHT_STAGE_SCRIPT (the manifest's configScripts say which config keys
# may supply each stage's script) and does not run this step at all when the config
# supplies none, so a check is never passed by a script that does not exist.
# A script with a '#!' line runs with that interpreter, any other with /bin/sh.
set -eu
stage=$1
script=${NODEWRIGHT_STAGE_SCRIPT:-}
if [ -z "$script" ] || [ ! -f "$script" ]; then
  echo "shellscript: no script for stage $stage (NODEWRIGHT_STAGE_SCRIPT=${script:-unset})" >&2
  exit 2
fi
name=${script##*/}
first=$(head -n 1 "$script")
echo "shellscript: running $name for stage $stage"
case "$first" in
  '#!'*) interpreter=${first#\#!}
         # shellcheck disable=SC2086 # the interpreter line may carry arguments
         exec $interpreter "$script" ;;
  *) exec /bin/sh "$script" ;;
esac
