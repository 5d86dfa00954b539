#!/bin/sh
# A security agent as a systemd service, from an artifact on the host.
#   install        install or update the artifact and the unit, (re)start the service
#   check          installed, enabled and active
#   remove         stop, disable and remove the service and what was installed
#   removed-check  nothing of it is left
set -eu
STATE="$NODEWRIGHT_DATA_DIR"
cfg() { cat "$NODEWRIGHT_CONFIG_DIR/$1" 2>/dev/null || true; }
SERVICE=$(cfg service | tr -d ' \t\n')
SERVICE=${SERVICE:-security-agent}
UNIT_NAME=${SERVICE%.service}.service
UNIT=/etc/systemd/system/$UNIT_NAME
BIN=/usr/local/bin/${SERVICE%.service}

record() { echo "$1=$2" >> "$STATE/installed.new"; }
recorded() { sed -n "s/^$1=//p" "$STATE/installed" 2>/dev/null | tail -n 1; }

install_artifact() {
  artifact=$(cfg artifact | tr -d '\n')
  if [ ! -f "$artifact" ]; then
    echo "security-agent: artifact $artifact does not exist on this host" >&2
    echo "stage it first (a copy task, a host image) or fix the config key 'artifact'" >&2
    exit 1
  fi
  case "$artifact" in
    *.deb)
      name=$(basename "$artifact" .deb | cut -d_ -f1)
      DEBIAN_FRONTEND=noninteractive dpkg -i "$artifact"
      record kind deb; record name "$name" ;;
    *.rpm)
      name=$(rpm -qp --qf '%{NAME}' "$artifact")
      rpm -U --replacepkgs "$artifact"
      record kind rpm; record name "$name" ;;
    *)
      mkdir -p "$(dirname "$BIN")"
      cp "$artifact" "$BIN.new"
      chmod 0755 "$BIN.new"
      mv "$BIN.new" "$BIN"
      record kind binary; record name "$BIN" ;;
  esac
}

write_unit() { # the unit comes from the config, is generated for an executable, or ships with the package
  unit=$(cfg unit)
  kind=$(sed -n 's/^kind=//p' "$STATE/installed.new")
  if [ -z "$unit" ] && [ "$kind" != binary ]; then
    record unit packaged
    return 0
  fi
  tmp=$(mktemp)
  if [ -n "$unit" ]; then
    printf '%s\n' "$unit" > "$tmp"
  else
    cat > "$tmp" <<UNIT
# Written by the NodeWright package security-agent $NODEWRIGHT_VERSION
[Unit]
Description=Security agent (installed by NodeWright)
After=network-online.target

[Service]
ExecStart=$BIN $(cfg args | tr '\n' ' ')
Restart=always

[Install]
WantedBy=multi-user.target
UNIT
  fi
  chmod 0644 "$tmp"
  mv "$tmp" "$UNIT"
  record unit "$UNIT"
}

install() {
  mkdir -p "$STATE"
  : > "$STATE/installed.new"
  record service "$UNIT_NAME"
  install_artifact
  write_unit
  previous_service=$(recorded service)
  if [ -n "$previous_service" ] && [ "$previous_service" != "$UNIT_NAME" ]; then
    echo "service renamed from $previous_service to $UNIT_NAME: removing the old one"
    systemctl disable --now "$previous_service" || true
    old_unit=$(recorded unit)
    [ "$old_unit" != packaged ] && [ -n "$old_unit" ] && rm -f "$old_unit"
  fi
  mv "$STATE/installed.new" "$STATE/installed"
  systemctl daemon-reload
  systemctl enable "$UNIT_NAME"
  systemctl restart "$UNIT_NAME"
  echo "security-agent: $UNIT_NAME installed from $(cfg artifact) and started"
}

check() {
  rc=0
  case $(recorded kind) in
    deb) dpkg-query -W "$(recorded name)" >/dev/null || { echo "package $(recorded name) is not installed" >&2; rc=1; } ;;
    rpm) rpm -q "$(recorded name)" >/dev/null || { echo "package $(recorded name) is not installed" >&2; rc=1; } ;;
    binary) [ -x "$(recorded name)" ] || { echo "$(recorded name) is missing" >&2; rc=1; } ;;
    *) echo "security-agent: nothing recorded as installed" >&2; return 1 ;;
  esac
  service=$(recorded service)
  systemctl is-enabled "$service" >/dev/null || { echo "$service is not enabled" >&2; rc=1; }
  state=$(systemctl is-active "$service" || true)
  [ "$state" = active ] || { echo "$service is $state, not active" >&2; rc=1; }
  [ $rc = 0 ] && echo "$service is installed, enabled and active"
  return $rc
}

remove() {
  [ -f "$STATE/installed" ] || { echo "security-agent: nothing recorded as installed"; return 0; }
  service=$(recorded service)
  systemctl disable --now "$service" || true
  systemctl stop "$service" || true
  unit=$(recorded unit)
  [ "$unit" != packaged ] && [ -n "$unit" ] && rm -f "$unit"
  systemctl daemon-reload
  case $(recorded kind) in
    deb) DEBIAN_FRONTEND=noninteractive dpkg --purge "$(recorded name)" ;;
    rpm) rpm -e "$(recorded name)" ;;
    binary) rm -f "$(recorded name)" ;;
  esac
  echo "security-agent: $service removed"
}

removed_check() {
  [ -f "$STATE/installed" ] || return 0
  rc=0
  service=$(recorded service)
  state=$(systemctl is-active "$service" || true)
  [ "$state" != active ] || { echo "$service is still active" >&2; rc=1; }
  if systemctl is-enabled "$service" >/dev/null 2>&1; then echo "$service is still enabled" >&2; rc=1; fi
  unit=$(recorded unit)
  if [ "$unit" != packaged ] && [ -e "$unit" ]; then echo "$unit is still there" >&2; rc=1; fi
  case $(recorded kind) in
    deb) if dpkg-query -W "$(recorded name)" >/dev/null 2>&1; then echo "package $(recorded name) is still installed" >&2; rc=1; fi ;;
    rpm) if rpm -q "$(recorded name)" >/dev/null 2>&1; then echo "package $(recorded name) is still installed" >&2; rc=1; fi ;;
    binary) if [ -e "$(recorded name)" ]; then echo "$(recorded name) is still there" >&2; rc=1; fi ;;
  esac
  return $rc
}

case "${1:-}" in
  install) install ;;
  check) check ;;
  remove) remove ;;
  removed-check) removed_check ;;
  *) echo "usage: $0 install|check|remove|removed-check" >&2; exit 2 ;;
esac
