#!/bin/sh
# Run the script the package config supplies for this stage ($1), if any.
# A script with a '#!' line runs with that interpreter, any other with /bin/sh.
set -eu
stage=$1
script="$NODEWRIGHT_CONFIG_DIR/$stage.sh"
if [ ! -f "$script" ]; then
  echo "shellscript: the config has no $stage.sh; nothing to do"
  exit 0
fi
first=$(head -n 1 "$script")
echo "shellscript: running $stage.sh"
case "$first" in
  '#!'*) interpreter=${first#\#!}
         # shellcheck disable=SC2086 # the interpreter line may carry arguments
         exec $interpreter "$script" ;;
  *) exec /bin/sh "$script" ;;
esac
