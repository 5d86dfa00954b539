# The simulator's systemd: unit files found and merged as systemd does (the
# directories below in order, drop-ins from every <unit>.d/ sorted by name, a name in
# an earlier directory hiding the same name in a later one), the configuration as
# last loaded (at boot and at daemon-reload: a copy under $LOADED), per-unit runtime
# state under $STATE, and units really started: their Exec lines run in this host
# root with a clean environment, conditions are evaluated, oneshot units run at boot.
# Sourced by systemctl and the simulated boot (init); shared functions set REPLY or
# globals instead of printing, to save forks.
UNIT_DIRS="/etc/systemd/system /run/systemd/system /usr/local/lib/systemd/system /usr/lib/systemd/system /lib/systemd/system"
STATE=/run/nodewright-sim/units
LOADED=/run/nodewright-sim/loaded
JOURNAL=/run/nodewright-sim/journal
UNITS_AWK=/usr/lib/nodewright-sim/_units.awk
EXEC_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
US=$(printf '\037')
TAB=$(printf '\t')
NOW=$(date '+%s %b %d %H:%M:%S')
mkdir -p "$STATE" "$JOURNAL"

unit_name() { # NAME -> REPLY: NAME with .service added when it has no unit suffix
  case $1 in
    *.service|*.target|*.socket|*.timer|*.mount|*.path|*.slice|*.scope|*.device|*.swap|*.automount) REPLY=$1 ;;
    *) REPLY=$1.service ;;
  esac
}

journal() { # UNIT MESSAGE
  echo "${NOW#* } $1: $2" >> "$JOURNAL/$1.log"
}

# unit_fragment PREFIX UNIT -> REPLY (the fragment's path, without PREFIX), MASKED,
# ALIAS_OF (the unit's real name when UNIT is an alias symlink); fails when not found.
unit_fragment() {
  REPLY="" MASKED=0 ALIAS_OF=""
  for _d in $UNIT_DIRS; do
    _f="$1$_d/$2"
    if [ -L "$_f" ]; then
      _t=$(readlink "$_f")
      if [ "$_t" = /dev/null ]; then MASKED=1; REPLY="$_d/$2"; return 0; fi
      [ -e "$_f" ] || continue
      [ "${_t##*/}" = "$2" ] || ALIAS_OF=${_t##*/}
      REPLY="$_d/$2"; return 0
    fi
    if [ -f "$_f" ]; then REPLY="$_d/$2"; return 0; fi
  done
  case $2 in
    *@?*.*)
      _tmpl="${2%%@*}@.${2##*.}"
      for _d in $UNIT_DIRS; do
        if [ -f "$1$_d/$_tmpl" ]; then REPLY="$_d/$_tmpl"; return 0; fi
      done ;;
  esac
  return 1
}

# unit_dropins PREFIX UNIT -> REPLY: the drop-ins' paths in the order systemd applies them.
unit_dropins() {
  _list=""
  for _d in $UNIT_DIRS; do
    for _f in "$1$_d/$2.d/"*.conf; do
      [ -f "$_f" ] && _list="$_list${_f##*/} $_d/$2.d/${_f##*/}
"
    done
  done
  REPLY=""
  [ -n "$_list" ] || return 0
  REPLY=$(printf '%s' "$_list" | sort -s -k1,1 | awk '!seen[$1]++ { printf "%s ", $2 }')
}

# unit_load NAME: which configuration systemd uses for the unit: the one loaded at
# boot or daemon-reload, or (a unit it has not loaded yet) the files on disk.
# Sets U (the unit's name), P (where its files are read from), FRAG, DROPINS and
# LOAD (loaded, masked, not-found); fails when not found.
unit_load() {
  unit_name "$1"; U=$REPLY
  P=""
  if [ -d "$LOADED" ] && unit_fragment "$LOADED" "$U"; then P=$LOADED
  elif ! unit_fragment "" "$U"; then FRAG="" DROPINS="" LOAD=not-found; return 1
  fi
  if [ -n "$ALIAS_OF" ]; then U=$ALIAS_OF; unit_fragment "$P" "$U" || { LOAD=not-found; return 1; }; fi
  FRAG=$REPLY
  if [ $MASKED = 1 ]; then LOAD=masked DROPINS=""; return 0; fi
  LOAD=loaded
  unit_dropins "$P" "$U"; DROPINS=$REPLY
}

unit_files() { # the loaded unit's files, readable from here
  REPLY="$P$FRAG"
  for _f in $DROPINS; do REPLY="$REPLY $P$_f"; done
}

# need_reload: the unit's files on disk differ from what systemd loaded.
need_reload() {
  [ "$P" = "$LOADED" ] || return 1
  unit_fragment "" "$U" || return 0
  [ "$REPLY" = "$FRAG" ] || return 0
  _frag=$REPLY
  unit_dropins "" "$U"
  [ "$REPLY" = "$DROPINS" ] || return 0
  for _f in $_frag $DROPINS; do cmp -s "$_f" "$LOADED$_f" || return 0; done
  return 1
}

warn_if_changed() {
  if [ -z "${DUMP_DIR:-}" ] && need_reload; then
    echo "Warning: The unit file, source configuration file or drop-ins of $U changed on disk. Run 'systemctl daemon-reload' to reload units." >&2
  fi
}

units_reload() { # what systemd does at boot and daemon-reload: load the unit files again
  rm -rf "$LOADED"
  mkdir -p "$LOADED"
  for _d in $UNIT_DIRS; do
    if [ -d "$_d" ] && [ ! -L "$_d" ]; then mkdir -p "$LOADED${_d%/*}"; cp -a "$_d" "$LOADED$_d"; fi
  done
  echo "${NOW%% *}" > "$STATE/.daemon-reload"
}

state_get() { # UNIT -> ACTIVE SUB RESULT
  ACTIVE=inactive SUB=dead RESULT=success
  [ -f "$STATE/$1" ] && read -r ACTIVE SUB RESULT < "$STATE/$1"
  : "${SUB:=dead}" "${RESULT:=success}"
}

state_set() { printf '%s %s %s\n' "$2" "$3" "$4" > "$STATE/$1"; }

unit_dump() { # [SUFFIX]: the loaded unit, as _units.awk dumps it -> DUMP (a file)
  if [ -n "${DUMP_DIR:-}" ] && [ -f "$DUMP_DIR/$U" ]; then DUMP=$DUMP_DIR/$U; return 0; fi
  DUMP=/run/nodewright-sim/dump.$$${1:-}
  unit_files
  # shellcheck disable=SC2086
  awk -v mode=dump -v unit="$U" -f "$UNITS_AWK" $REPLY > "$DUMP"
}

dump_get() { # KEY -> REPLY: the first value of KEY in the dump
  REPLY=""
  while IFS="$TAB" read -r _k _v; do
    if [ "$_k" = "$1" ]; then REPLY=$_v; return 0; fi
  done < "$DUMP"
  return 1
}

dump_list() { # KEY -> REPLY: every value of KEY, space-separated
  REPLY=""
  while IFS="$TAB" read -r _k _v; do
    [ "$_k" = "$1" ] && REPLY="$REPLY $_v"
  done < "$DUMP"
  REPLY=${REPLY# }
}

resolve_exec() { # COMMAND -> REPLY: its absolute path, as systemd finds it
  case $1 in
    /*) REPLY=$1 ;;
    *) REPLY=""
       _old=$IFS; IFS=:
       for _p in $EXEC_PATH; do if [ -x "$_p/$1" ]; then REPLY=$_p/$1; break; fi; done
       IFS=$_old ;;
  esac
}

# run_execs KEY: every Exec line KEY of the dumped unit, in order, as systemd runs
# them (working directory /, only the unit's environment). Fails at the first line
# that fails without a '-' prefix; EXEC_STATUS is its status (203: not executable).
run_execs() {
  _which=$1
  _envs="PATH=$EXEC_PATH${US}LANG=C.UTF-8${US}HOME=/root${US}INVOCATION_ID=$$"
  while IFS="$TAB" read -r _k _v; do
    [ "$_k" = env ] && _envs="$_envs$US$_v"
  done < "$DUMP"
  _rc=0
  while IFS="$TAB" read -r _k _key _ignore _args; do
    [ "$_k" = exec ] && [ "$_key" = "$_which" ] || continue
    resolve_exec "${_args%%"$US"*}"
    if [ -z "$REPLY" ] || [ ! -x "$REPLY" ]; then
      journal "$U" "Failed to locate executable ${_args%%"$US"*}: No such file or directory"
      EXEC_STATUS=203
    else
      case $_args in *"$US"*) _rest=${_args#*"$US"} ;; *) _rest="" ;; esac
      _old=$IFS; IFS=$US; set -f
      # shellcheck disable=SC2086
      if [ -n "$_rest" ]; then set -- $_envs$US$REPLY$US$_rest; else set -- $_envs$US$REPLY; fi
      set +f; IFS=$_old
      (cd / && exec env -i "$@") >> "$JOURNAL/$U.log" 2>&1 < /dev/null
      EXEC_STATUS=$?
    fi
    if [ "$EXEC_STATUS" != 0 ]; then
      journal "$U" "$_which exited, status=$EXEC_STATUS"
      [ "$_ignore" = 1 ] || { _rc=1; break; }
    fi
  done < "$DUMP"
  return $_rc
}

check_condition() { # NAME ARG: one unit condition, on this host root
  case $1 in
    PathExists) [ -e "$2" ] ;;
    PathExistsGlob) for _g in $2; do [ -e "$_g" ] && return 0; done; return 1 ;;
    PathIsDirectory) [ -d "$2" ] ;;
    PathIsSymbolicLink) [ -L "$2" ] ;;
    PathIsReadWrite) [ -w "$2" ] ;;
    DirectoryNotEmpty) [ -d "$2" ] && [ -n "$(ls -A "$2" 2>/dev/null)" ] ;;
    FileNotEmpty) [ -s "$2" ] ;;
    FileIsExecutable) [ -x "$2" ] ;;
    KernelCommandLine)
      for _w in $(cat /proc/cmdline 2>/dev/null); do
        case $2 in
          *=*) [ "$_w" = "$2" ] && return 0 ;;
          *) [ "$_w" = "$2" ] || [ "${_w%%=*}" = "$2" ] && return 0 ;;
        esac
      done
      return 1 ;;
    Virtualization) case $2 in no|false|0) return 0 ;; *) return 1 ;; esac ;;
    Architecture)
      . /etc/nodewright-sim/node.env
      case "$2:$MACHINE" in x86-64:x86_64|arm64:aarch64|native:*) return 0 ;; *) return 1 ;; esac ;;
    *) return 0 ;;
  esac
}

# conditions KIND: the dumped unit's conditions (cond) or assertions (assert) hold:
# every plain one, and one of the triggering (|) ones if there are any.
conditions() {
  _failed=0 _triggers=0 _triggered=0
  while IFS="$TAB" read -r _k _name _trigger _negate _arg; do
    [ "$_k" = "$1" ] || continue
    if check_condition "$_name" "$_arg"; then _ok=1; else _ok=0; fi
    [ "$_negate" = 1 ] && _ok=$((1 - _ok))
    if [ "$_trigger" = 1 ]; then _triggers=$((_triggers + 1)); _triggered=$((_triggered + _ok))
    elif [ $_ok = 0 ]; then _failed=1; FAILED_CONDITION="$1 $_name=$_arg"
    fi
  done < "$DUMP"
  if [ $_failed = 0 ] && [ $_triggers -gt 0 ] && [ $_triggered = 0 ]; then
    FAILED_CONDITION="none of the $_triggers triggering $1 checks holds"
  fi
  [ $_failed = 0 ] && { [ $_triggers = 0 ] || [ $_triggered -gt 0 ]; }
}

job_failed() {
  state_set "$U" failed failed exit-code
  run_execs ExecStopPost || true
  if [ "${QUIET:-0}" != 1 ]; then
    echo "Job for $U failed because the control process exited with error code." >&2
    echo "See \"systemctl status $U\" and \"journalctl -xeu $U\" for details." >&2
  fi
  return 1
}

# unit_start NAME [restart]: start the unit (restart: stop it first when active).
unit_start() {
  if ! unit_load "$1"; then echo "Failed to ${VERB:-start} $U: Unit $U not found." >&2; return 5; fi
  if [ "$LOAD" = masked ]; then echo "Failed to ${VERB:-start} $U: Unit $U is masked." >&2; return 1; fi
  state_get "$U"
  if [ "$ACTIVE" = active ]; then
    [ "${2:-}" = restart ] || return 0
    unit_stop_loaded
  fi
  warn_if_changed
  unit_dump
  if ! conditions cond; then
    journal "$U" "$U was skipped because of an unmet condition check ($FAILED_CONDITION)"
    state_set "$U" inactive dead success
    return 0
  fi
  if ! conditions assert; then
    journal "$U" "Assertion failed for $U ($FAILED_CONDITION)"
    state_set "$U" failed failed assert
    echo "Assertion failed on job for $U." >&2
    return 1
  fi
  dump_get type; _type=$REPLY
  [ "${2:-}" = restart ] && echo "${NOW%% *}" >> "$STATE/$U.restarts"  # what was restarted since the boot
  if [ -z "$_type" ]; then state_set "$U" active active success; return 0; fi
  run_execs ExecCondition || { journal "$U" "skipped: ExecCondition failed"; state_set "$U" inactive dead success; return 0; }
  run_execs ExecStartPre || { job_failed; return 1; }
  case $_type in
    oneshot)
      run_execs ExecStart || { job_failed; return 1; }
      dump_get remain
      if [ "$REPLY" = yes ]; then state_set "$U" active exited success; else state_set "$U" inactive dead success; fi ;;
    forking)
      run_execs ExecStart || { job_failed; return 1; }
      state_set "$U" active running success ;;
    *)
      # A daemon is not run; it is active when its program is there to run.
      _main=$(awk -F'\t' '$1 == "exec" && $2 == "ExecStart" { print $4; exit }' "$DUMP")
      resolve_exec "${_main%%"$US"*}"
      if [ -z "$_main" ] || [ -z "$REPLY" ] || [ ! -x "$REPLY" ]; then
        journal "$U" "Failed to locate executable ${_main%%"$US"*}: No such file or directory"
        if [ "$_type" = simple ]; then state_set "$U" failed failed exit-code; return 0; fi
        job_failed; return 1
      fi
      state_set "$U" active running success ;;
  esac
  run_execs ExecStartPost || { job_failed; return 1; }
  journal "$U" "Started $U."
  return 0
}

unit_stop_loaded() { # stop the loaded unit U
  unit_dump
  state_get "$U"
  if [ "$ACTIVE" = active ]; then run_execs ExecStop || true; fi
  if [ "$ACTIVE" != inactive ]; then run_execs ExecStopPost || true; fi
  state_set "$U" inactive dead success
  journal "$U" "Stopped $U."
}

unit_stop() {
  if ! unit_load "$1"; then
    if [ -f "$STATE/$U" ]; then state_set "$U" inactive dead success; return 0; fi
    echo "Failed to stop $U: Unit $U not loaded." >&2; return 5
  fi
  [ "$LOAD" = masked ] && { state_set "$U" inactive dead success; return 0; }
  unit_stop_loaded
}

# unit_file_state NAME -> REPLY (enabled, static, disabled, masked, alias, not-found),
# from the files on disk as `systemctl is-enabled` reads them.
unit_file_state() {
  unit_name "$1"; _u=$REPLY
  if ! unit_fragment "" "$_u"; then REPLY=not-found; return 4; fi
  if [ $MASKED = 1 ]; then case $REPLY in /run/*) REPLY=masked-runtime ;; *) REPLY=masked ;; esac; return 1; fi
  [ -n "$ALIAS_OF" ] && { REPLY=alias; return 0; }
  for _l in /etc/systemd/system/*.wants/"$_u" /etc/systemd/system/*.requires/"$_u"; do
    [ -L "$_l" ] && { REPLY=enabled; return 0; }
  done
  for _l in /run/systemd/system/*.wants/"$_u" /run/systemd/system/*.requires/"$_u"; do
    [ -L "$_l" ] && { REPLY=enabled-runtime; return 0; }
  done
  _P=$P _U=$U _FRAG=$FRAG _DROPINS=$DROPINS _DUMP=${DUMP:-}
  P="" U=$_u FRAG=$REPLY
  unit_dropins "" "$_u"; DROPINS=$REPLY
  unit_dump .state
  dump_list wantedby; _wb=$REPLY; dump_list requiredby; _wb="$_wb$REPLY"; dump_list alias; _wb="$_wb$REPLY"
  dump_list also; _also=$REPLY
  rm -f "$DUMP"
  P=$_P U=$_U FRAG=$_FRAG DROPINS=$_DROPINS DUMP=$_DUMP
  if [ -z "$_wb" ] && [ -z "$_also" ]; then REPLY=static; return 0; fi
  if [ -z "$_wb" ]; then REPLY=indirect; return 0; fi
  REPLY=disabled
  return 1
}
