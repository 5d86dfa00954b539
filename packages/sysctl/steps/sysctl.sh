#!/bin/sh
# Kernel parameters from the package config: one config key per parameter.
#   config           write /etc/sysctl.d/90-nodewright-sysctl.conf and load it
#   check            every configured parameter has its value, now and at boot
#   uninstall        put back the values the package replaced, remove the file
#   uninstall-check  the file is gone and the replaced values are back
set -eu
CONF=/etc/sysctl.d/90-nodewright-sysctl.conf
ORIGINAL="$NODEWRIGHT_DATA_DIR/original.conf"   # "key = value" the package replaced

normalize() { tr '\t\n' '  ' | tr -s ' ' | sed -e 's/^ //' -e 's/ $//'; }
has_original() { awk -v k="$1" -F' = ' '$1 == k { found = 1 } END { exit !found }' "$ORIGINAL"; }
has_line() { awk -v l="$1" '$0 == l { found = 1 } END { exit !found }' "$2" 2>/dev/null; }
configured_keys() { for f in "$NODEWRIGHT_CONFIG_DIR"/*; do [ -f "$f" ] && basename "$f"; done; return 0; }
current() {
  if ! out=$(sysctl -n "$1" 2>/dev/null); then
    echo "sysctl: kernel parameter $1 does not exist on this kernel ($(uname -r))" >&2
    return 1
  fi
  printf '%s\n' "$out" | normalize
}

write_and_load() {
  mkdir -p "$NODEWRIGHT_DATA_DIR" /etc/sysctl.d
  touch "$ORIGINAL"
  tmp=$(mktemp)
  echo "# Written by the NodeWright package sysctl $NODEWRIGHT_VERSION: change its config, not this file." > "$tmp"
  for key in $(configured_keys); do
    value=$(normalize < "$NODEWRIGHT_CONFIG_DIR/$key")
    if ! has_original "$key"; then
      was=$(current "$key") || { rm -f "$tmp"; exit 1; }
      echo "$key = $was" >> "$ORIGINAL"
    fi
    echo "$key = $value" >> "$tmp"
  done
  # A key dropped from the config gets its original value back.
  keep=$(mktemp)
  while IFS= read -r line; do
    key=${line%% = *}
    if [ -f "$NODEWRIGHT_CONFIG_DIR/$key" ]; then
      echo "$line" >> "$keep"
    else
      echo "restoring $key = ${line#* = }"
      sysctl -w "$key=${line#* = }" >/dev/null
    fi
  done < "$ORIGINAL"
  mv "$keep" "$ORIGINAL"
  chmod 0644 "$tmp"
  mv "$tmp" "$CONF"
  sysctl -p "$CONF"
}

check() {
  rc=0
  for key in $(configured_keys); do
    want=$(normalize < "$NODEWRIGHT_CONFIG_DIR/$key")
    have=$(current "$key") || { rc=1; continue; }
    if [ "$have" != "$want" ]; then
      echo "$key is '$have', expected '$want'" >&2
      rc=1
    fi
    if ! has_line "$key = $want" "$CONF"; then
      echo "$key = $want is missing from $CONF: it would be lost at the next boot" >&2
      rc=1
    fi
  done
  [ $rc = 0 ] && echo "all $(configured_keys | wc -l) parameters have their configured values"
  return $rc
}

uninstall() {
  rm -f "$CONF"
  [ -f "$ORIGINAL" ] || return 0
  while IFS= read -r line; do
    echo "restoring ${line%% = *} = ${line#* = }"
    sysctl -w "${line%% = *}=${line#* = }" >/dev/null
  done < "$ORIGINAL"
}

uninstall_check() {
  rc=0
  if [ -e "$CONF" ]; then echo "$CONF is still there" >&2; rc=1; fi
  if [ -f "$ORIGINAL" ]; then
    while IFS= read -r line; do
      have=$(current "${line%% = *}") || { rc=1; continue; }
      if [ "$have" != "${line#* = }" ]; then
        echo "${line%% = *} is '$have', not its original '${line#* = }'" >&2
        rc=1
      fi
    done < "$ORIGINAL"
  fi
  return $rc
}

case "${1:-}" in
  config) write_and_load ;;
  check) check ;;
  uninstall) uninstall ;;
  uninstall-check) uninstall_check ;;
  *) echo "usage: $0 config|check|uninstall|uninstall-check" >&2; exit 2 ;;
esac
