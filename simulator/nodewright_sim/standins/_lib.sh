# Shared by the simulator's stand-ins. They run inside a node's host root
# (chroot), record what was asked and emulate the effect on that node only.
SIM=/var/lib/nodewright-sim
mkdir -p "$SIM" /run/nodewright-sim
sim_log() { echo "$(date +%s) $*" >> "$SIM/actions.log"; }
sim_sysctl_path() { echo "/proc/sys/$(echo "$1" | tr . /)"; }
sim_sysctl_set() { # key value
  p=$(sim_sysctl_path "$1")
  if [ ! -f "$p" ]; then
    echo "sysctl: cannot stat $p: No such file or directory" >&2
    return 1
  fi
  # Numeric parameters take numbers only, as the kernel does (EINVAL otherwise).
  if grep -qE '^[-0-9[:space:]]+$' "$p" && ! printf '%s' "$2" | grep -qE '^[[:space:]]*-?[0-9]+([[:space:]]+-?[0-9]+)*[[:space:]]*$'; then
    echo "sysctl: setting key \"$1\": Invalid argument" >&2
    return 1
  fi
  printf '%s\n' "$2" > "$p"
}
sim_sysctl_apply_file() { # file
  rc=0
  while IFS= read -r line || [ -n "$line" ]; do
    line=$(printf '%s' "$line" | sed -e 's/[#;].*$//' -e 's/^[ \t]*//' -e 's/[ \t]*$//')
    [ -z "$line" ] && continue
    ignore=0
    case "$line" in -*) ignore=1; line=${line#-} ;; esac
    key=$(printf '%s' "${line%%=*}" | sed 's/[ \t]*$//')
    val=$(printf '%s' "${line#*=}" | sed 's/^[ \t]*//')
    if sim_sysctl_set "$key" "$val"; then echo "$key = $val"; elif [ $ignore = 0 ]; then rc=1; fi
  done < "$1"
  return $rc
}
sim_sysctl_system() {
  rc=0
  for f in $(ls /etc/sysctl.d/*.conf /run/sysctl.d/*.conf /usr/lib/sysctl.d/*.conf 2>/dev/null | awk -F/ '{print $NF" "$0}' | sort -k1,1 -u | cut -d" " -f2) /etc/sysctl.conf; do
    [ -f "$f" ] || continue
    echo "* Applying $f ..."
    sim_sysctl_apply_file "$f" || rc=1
  done
  return $rc
}
