# Simulated package database shared by the apt/dpkg and dnf/rpm stand-ins:
# pkgdb/installed and pkgdb/available hold "NAME VERSION" lines. A package the
# simulator knows the contents of (payload/deb/NAME, payload/rpm/NAME: its files,
# .depends) lays its files down when installed - units, programs, configuration -
# and takes them away when removed (configuration under /etc stays unless purged);
# a removed package's running services are stopped first, and systemd reloads units
# after either, as Debian's and RPM's packaging scripts do. Other maintainer scripts
# are not run.
DB=/var/lib/nodewright-sim/pkgdb
PAYLOAD_ROOT=/usr/lib/nodewright-sim/payload
mkdir -p "$DB"; touch "$DB/installed" "$DB/available"
pkg_installed_version() { awk -v n="$1" '$1==n {print $2}' "$DB/installed"; }
pkg_available_version() { awk -v n="$1" '$1==n {print $2}' "$DB/available" | tail -1; }

pkg_payload_install() { # family name: lay the package's files down, list them
  d=$PAYLOAD_ROOT/$1/$2
  [ -d "$d" ] || return 0
  (cd "$d" && find . ! -type d ! -name .depends) | while read -r f; do
    f=${f#./}
    case $f in etc/*) [ -e "/$f" ] && continue ;; esac  # configuration as the host has it
    mkdir -p "$(dirname "/$f")"
    rm -f "/$f"  # never write through a hard link into another node's copy
    cp -a "$d/$f" "/$f"
    echo "/$f"
  done > "$DB/$2.list"
  grep -q '\.service$' "$DB/$2.list" && systemctl daemon-reload
  return 0
}

pkg_payload_remove() { # name purge(0|1)
  [ -f "$DB/$1.list" ] || return 0
  for f in $(grep '/systemd/system/[^/]*\.service$' "$DB/$1.list"); do
    u=${f##*/}
    [ "$(systemctl is-active "$u" 2>/dev/null)" = inactive ] || systemctl stop "$u"
  done
  while read -r f; do
    case $f in /etc/*) [ "$2" = 1 ] && rm -f "$f" ;; *) rm -f "$f" ;; esac
  done < "$DB/$1.list"
  reload=0; grep -q '\.service$' "$DB/$1.list" && reload=1
  rm -f "$DB/$1.list"
  [ $reload = 0 ] || systemctl daemon-reload
}

pkg_set() { # name version [family]
  grep -v "^$1 " "$DB/installed" > "$DB/installed.new"; echo "$1 $2" >> "$DB/installed.new"
  sort "$DB/installed.new" > "$DB/installed"; rm -f "$DB/installed.new"
  case "$1" in
    linux-image-*|kernel|kernel-core|kernel-[0-9]*)
      echo "$2" > /var/lib/nodewright-sim/next-kernel
      mkdir -p /boot; : > "/boot/vmlinuz-$2"; : > "/boot/initrd.img-$2" ;;
  esac
  pkg_payload_install "${3:-deb}" "$1"
}
pkg_remove() { # name [purge] [family]
  grep -v "^$1 " "$DB/installed" > "$DB/installed.new"; mv "$DB/installed.new" "$DB/installed"
  pkg_payload_remove "$1" "${2:-0}"
}
pkg_install_spec() { # name[=version] [family]; returns 100 when not available
  local n v deps dep  # called again for each dependency
  n=${1%%=*}; v=""; case "$1" in *=*) v=${1#*=} ;; esac
  [ -n "$v" ] || v=$(pkg_available_version "$n")
  if [ -z "$v" ]; then echo "E: Unable to locate package $n" >&2; return 100; fi
  deps=$PAYLOAD_ROOT/${2:-deb}/$n/.depends
  if [ -f "$deps" ]; then
    for dep in $(cat "$deps"); do
      [ -n "$(pkg_installed_version "$dep")" ] || pkg_install_spec "$dep" "${2:-deb}" || return $?
    done
  fi
  [ "$(pkg_installed_version "$n")" = "$v" ] && { echo "$n is already the newest version ($v)."; return 0; }
  echo "Setting up $n ($v) ..."
  pkg_set "$n" "$v" "${2:-deb}"
}
