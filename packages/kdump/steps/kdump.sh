#!/bin/sh
# Crash dumps with kdump.
#   install          install the kdump tooling and enable its service
#   configure        crash-kernel reservation on the kernel command line, dump directory
#   configure-check  the boot configuration carries the reservation
#   active-check     after the reboot: the running kernel has the reservation, the
#                    dump service is active
#   remove           undo all of it (the tooling only if this package installed it)
set -eu
STATE="$NODEWRIGHT_DATA_DIR"
DROPIN=/etc/default/grub.d/90-nodewright-kdump.cfg
cfg() { tr -d ' \t\n' < "$NODEWRIGHT_CONFIG_DIR/$1"; }

family() {
  id=$(. /etc/os-release 2>/dev/null; echo "${ID:-} ${ID_LIKE:-}")
  case " $id " in
    *" rhel "*|*" fedora "*|*" centos "*|*" rocky "*|*" almalinux "*|*" amzn "*) echo rhel ;;
    *) echo debian ;;
  esac
}
if [ "$(family)" = rhel ]; then
  TOOLS=kexec-tools; SERVICE=kdump.service; SETTINGS=/etc/kdump.conf
else
  TOOLS=kdump-tools; SERVICE=kdump-tools.service; SETTINGS=/etc/default/kdump-tools
fi

installed() {
  if [ "$(family)" = rhel ]; then rpm -q "$TOOLS" >/dev/null 2>&1
  else dpkg-query -W "$TOOLS" >/dev/null 2>&1; fi
}

grub_cfg() { for f in /boot/grub/grub.cfg /boot/grub2/grub.cfg; do [ -f "$f" ] && { echo "$f"; return 0; }; done; echo /boot/grub/grub.cfg; }

regenerate_boot_config() {
  if command -v update-grub >/dev/null 2>&1; then update-grub
  elif command -v grub2-mkconfig >/dev/null 2>&1; then grub2-mkconfig -o /boot/grub2/grub.cfg
  elif command -v grub-mkconfig >/dev/null 2>&1; then grub-mkconfig -o /boot/grub/grub.cfg
  else echo "kdump: no update-grub or grub-mkconfig: this host does not boot with GRUB" >&2; return 1
  fi
}

install_tools() {
  mkdir -p "$STATE"
  if installed; then
    echo "$TOOLS is already installed"
  else
    echo "installing $TOOLS"
    if [ "$(family)" = rhel ]; then dnf install -y -q "$TOOLS"
    else DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$TOOLS"; fi
    touch "$STATE/installed-tools"
  fi
  systemctl enable "$SERVICE"
}

install_check() {
  installed || { echo "$TOOLS is not installed" >&2; return 1; }
  systemctl is-enabled "$SERVICE" >/dev/null || { echo "$SERVICE is not enabled" >&2; return 1; }
}

set_coredir() {
  dir=$(cfg coredir)
  mkdir -p "$dir"
  [ -e "$SETTINGS" ] || { touch "$SETTINGS"; touch "$STATE/created-settings"; }
  if [ "$(family)" = rhel ]; then key="path "; line="path $dir"; else key="KDUMP_COREDIR="; line="KDUMP_COREDIR=\"$dir\""; fi
  grep -v "^$key" "$SETTINGS" > "$SETTINGS.new" || true
  echo "$line" >> "$SETTINGS.new"
  cat "$SETTINGS.new" > "$SETTINGS"
  rm -f "$SETTINGS.new"
}

configure() {
  mkdir -p "$STATE" /etc/default/grub.d
  reservation=$(cfg crashkernel)
  tmp=$(mktemp)
  cat > "$tmp" <<CFG
# Written by the NodeWright package kdump $NODEWRIGHT_VERSION: change its config, not this file.
GRUB_CMDLINE_LINUX_DEFAULT="\$GRUB_CMDLINE_LINUX_DEFAULT crashkernel=$reservation"
CFG
  chmod 0644 "$tmp"
  mv "$tmp" "$DROPIN"
  regenerate_boot_config
  set_coredir
  echo "crashkernel=$reservation takes effect at the next boot; dumps go to $(cfg coredir)"
}

configure_check() {
  reservation=$(cfg crashkernel)
  grep -q "crashkernel=$reservation" "$(grub_cfg)" || {
    echo "$(grub_cfg) does not boot with crashkernel=$reservation" >&2; return 1; }
  [ -d "$(cfg coredir)" ] || { echo "dump directory $(cfg coredir) is missing" >&2; return 1; }
}

active_check() {
  reservation=$(cfg crashkernel)
  case " $(cat /proc/cmdline) " in
    *" crashkernel=$reservation "*) ;;
    *) echo "the running kernel was booted without crashkernel=$reservation: $(cat /proc/cmdline)" >&2; return 1 ;;
  esac
  state=$(systemctl is-active "$SERVICE" || true)
  [ "$state" = active ] || { echo "$SERVICE is $state, not active" >&2; return 1; }
  echo "crash kernel reserved ($reservation) and $SERVICE active"
}

remove() {
  rm -f "$DROPIN"
  regenerate_boot_config
  systemctl disable "$SERVICE" || true
  if [ -f "$STATE/created-settings" ]; then rm -f "$SETTINGS"; fi
  if [ -f "$STATE/installed-tools" ]; then
    echo "removing $TOOLS"
    if [ "$(family)" = rhel ]; then dnf remove -y -q "$TOOLS"
    else DEBIAN_FRONTEND=noninteractive apt-get remove -y -q "$TOOLS"; fi
  fi
  echo "the crash-kernel reservation ends at the next boot"
}

remove_check() {
  rc=0
  [ ! -e "$DROPIN" ] || { echo "$DROPIN is still there" >&2; rc=1; }
  if grep -q "crashkernel=$(cfg crashkernel)" "$(grub_cfg)" 2>/dev/null; then
    echo "$(grub_cfg) still reserves a crash kernel" >&2; rc=1
  fi
  if [ -f "$STATE/installed-tools" ] && installed; then echo "$TOOLS is still installed" >&2; rc=1; fi
  return $rc
}

case "${1:-}" in
  install) install_tools ;;
  install-check) install_check ;;
  configure) configure ;;
  configure-check) configure_check ;;
  active-check) active_check ;;
  remove) remove ;;
  remove-check) remove_check ;;
  *) echo "usage: $0 install|install-check|configure|configure-check|active-check|remove|remove-check" >&2; exit 2 ;;
esac
