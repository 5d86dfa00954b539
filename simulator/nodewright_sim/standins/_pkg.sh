# Simulated package database shared by the apt/dpkg and dnf/rpm stand-ins.
DB=/var/lib/nodewright-sim/pkgdb
mkdir -p "$DB"; touch "$DB/installed" "$DB/available"
pkg_installed_version() { awk -v n="$1" '$1==n {print $2}' "$DB/installed"; }
pkg_available_version() { awk -v n="$1" '$1==n {print $2}' "$DB/available" | tail -1; }
pkg_set() { # name version
  grep -v "^$1 " "$DB/installed" > "$DB/installed.new"; echo "$1 $2" >> "$DB/installed.new"
  sort "$DB/installed.new" > "$DB/installed"; rm -f "$DB/installed.new"
  case "$1" in linux-image-*|kernel|kernel-core) echo "$2" > /var/lib/nodewright-sim/next-kernel ;; esac
}
pkg_remove() { grep -v "^$1 " "$DB/installed" > "$DB/installed.new"; mv "$DB/installed.new" "$DB/installed"; }
pkg_install_spec() { # name[=version] ; returns 100 when not available
  n=${1%%=*}; v=""; case "$1" in *=*) v=${1#*=} ;; esac
  [ -n "$v" ] || v=$(pkg_available_version "$n")
  if [ -z "$v" ]; then echo "E: Unable to locate package $n" >&2; return 100; fi
  pkg_set "$n" "$v"; echo "Setting up $n ($v) ..."
}
