# Shared by the simulator's stand-ins. They run inside a node's host root
# (chroot), record what was asked and emulate the effect on that node only.
SIM=/var/lib/nodewright-sim
mkdir -p "$SIM" /run/nodewright-sim
sim_log() { echo "$(date +%s) $*" >> "$SIM/actions.log"; }
# Kernel parameters are files under the simulated /proc/sys; awk applies a whole
# list in one process ("key = value" lines from sysctl.d files, or key=value words).
SIM_SYSCTL_AWK='
function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }
function fail(msg) { print msg | "cat 1>&2"; rc = 1 }
{
  line = $0
  if (files) sub(/[#;].*$/, "", line)
  line = trim(line)
  if (line == "") next
  ignore = 0
  if (substr(line, 1, 1) == "-") { ignore = 1; line = substr(line, 2) }
  eq = index(line, "=")
  if (eq == 0) { if (!files) fail("sysctl: \"" line "\" must be of the form name=value"); next }
  key = trim(substr(line, 1, eq - 1)); val = trim(substr(line, eq + 1))
  path = key; gsub(/\./, "/", path); path = "/proc/sys/" path
  if ((getline cur < path) < 0) {
    if (lenient) print "Couldn'"'"'t write '"'"'" val "'"'"' to '"'"'" key "'"'"', ignoring: No such file or directory" | "cat 1>&2"
    else if (!ignore) fail("sysctl: cannot stat " path ": No such file or directory")
    next
  }
  close(path)
  multi = val ~ /^-?[0-9]+([ \t]+-?[0-9]+)+$/
  # Numeric parameters take numbers only, as the kernel does (EINVAL otherwise).
  if (cur ~ /^[-0-9 \t]+$/ && val !~ /^-?[0-9]+$/ && !multi) {
    if (!ignore) fail("sysctl: setting key \"" key "\": Invalid argument"); next
  }
  if (multi) gsub(/[ \t]+/, "\t", val)
  print val > path; close(path)
  if (!quiet) { shown = val; gsub(/\t/, " ", shown); print key " = " shown }
}
END { exit rc }'
sim_sysctl_path() { echo "/proc/sys/$(echo "$1" | tr . /)"; }
sim_sysctl_set() { # key=value...: set each (quiet=1: print nothing)
  printf '%s\n' "$@" | awk -v quiet="${quiet:-0}" -v files=0 "$SIM_SYSCTL_AWK"
}
sim_sysctl_apply_file() { # file (lenient=1: a parameter this kernel lacks is not an error, as for systemd-sysctl)
  awk -v quiet="${quiet:-0}" -v lenient="${lenient:-0}" -v files=1 "$SIM_SYSCTL_AWK" "$1"
}
sim_sysctl_system() {
  rc=0
  for f in $(ls /etc/sysctl.d/*.conf /run/sysctl.d/*.conf /usr/local/lib/sysctl.d/*.conf /usr/lib/sysctl.d/*.conf /lib/sysctl.d/*.conf 2>/dev/null | awk -F/ '{print $NF" "$0}' | sort -s -k1,1 | awk '!seen[$1]++ {print $2}') /etc/sysctl.conf; do
    [ -f "$f" ] || continue
    [ "${quiet:-0}" = 1 ] || echo "* Applying $f ..."
    sim_sysctl_apply_file "$f" || rc=1
  done
  return $rc
}
