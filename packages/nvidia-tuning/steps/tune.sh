#!/bin/sh
# NVIDIA host tuning from a profile resolved on the controller; the package config
# carries it (see docs/nvidia-tuning.md, "As a NodeWright package"):
#   resolved.profile   name, arch (uname -m), os (ID and VERSION_ID of os-release),
#                      bootloader (method, update command), cmdline (kernel parameters),
#                      and per file: config key, path, flags (reload: a systemd unit or
#                      drop-in; bootloader: the GRUB drop-in), the interrupt the file needs
#                      when it was edited on the host, and when it is removed
#   resolved.file.*    the files' contents
#   resolved.checks    per setting: id, probe, rule, expected value (or why it is skipped)
#   resolved.reboot, resolved.service.*
#                      the settings' values grouped by the interrupt a change needs: the
#                      planner asks for these interrupts (configInterrupts) before the node
#                      is drained
#
#   preflight      the host is the one the profile was resolved for: architecture, OS,
#                  boot loader and initramfs tools, what the modules it loads need (a
#                  peer-memory provider for nvidia_peermem, GDRCopy for gdrdrv), and no
#                  limit sysctl below the value the host has now (the floor rule)
#   apply          write the files, remove those the profile no longer has, regenerate the
#                  boot configuration, rebuild the initramfs when driver options changed,
#                  apply sysctls at once where the OS forgets them at boot (COS), reload
#                  systemd; ask for the restarts that files edited on the host need (never
#                  a reboot: reboots are planned)
#   written-check  every file holds what the profile says, the boot configuration has the
#                  kernel parameters, the initramfs was built from the driver options; where
#                  the settings took effect as they were written (COS), they read back too
#   verify         every setting reads back as the profile says (after the interrupt)
#   remove         remove every file written, regenerate the boot configuration
#   removed-check  nothing written is left
#
# observe.sh reads the settings back, verdict.sh judges them (the role's check uses both).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TAB=$(printf '\t')
CONFIG=${NODEWRIGHT_CONFIG_DIR:-}
DATA=${NODEWRIGHT_DATA_DIR:-}
PROFILE=$CONFIG/resolved.profile
REQUESTS=""

die() { echo "nvidia-tuning: $*" >&2; exit 1; }

# The fields after the tag of the first line tagged $1 in the profile.
field() { awk -F'\t' -v k="$1" '$1 == k { print substr($0, length($1) + 2); exit }' "$PROFILE"; }

in_profile() { awk -F'\t' -v p="$1" '$1 == "file" && $3 == p { found = 1 } END { exit !found }' "$PROFILE"; }

request() { # the words of an interrupt: noop, or service UNIT...
  if [ "${1:-noop}" = service ]; then
    shift
    REQUESTS="$REQUESTS $*"
  fi
}

prune_dir() { # a drop-in directory left empty goes too
  d=$(dirname "$1")
  case $d in
    /etc/systemd/*.d) rmdir "$d" 2>/dev/null || true ;;
  esac
}

grub_cfg() {
  for f in /boot/grub/grub.cfg /boot/grub2/grub.cfg; do
    if [ -f "$f" ]; then echo "$f"; return 0; fi
  done
  echo /boot/grub/grub.cfg
}

need_profile() {
  [ -f "$PROFILE" ] || die "the config has no resolved.profile. The profile is resolved on the controller: \
playbooks/rollout.yml does it for every targeted node; with nodewright.fleet.package give the spec through \
the nodewright.fleet.tuning_package_spec filter"
}

preflight() {
  need_profile
  name=$(field name)
  want=$(field arch)
  have=$(uname -m)
  [ "$have" = "$want" ] || die "profile '$name' is for $want hosts, this host is $have: check the node's labels \
or set accelerator"
  release=/etc/os-release
  [ -f "$release" ] || release=/usr/lib/os-release
  ids=$( (. "$release"; echo "${ID:-} ${ID_LIKE:-}") )
  version=$( (. "$release"; echo "${VERSION_ID:-}") )
  os=$(field os)
  want_id=${os%%"$TAB"*}
  want_version=${os#*"$TAB"}
  [ "$want_version" != "$os" ] || want_version=""
  case " $ids " in
    *" $want_id "*) ;;
    *) die "profile '$name' is for $want_id $want_version, this host runs $ids $version ($release): set os" ;;
  esac
  if [ -n "$want_version" ]; then
    case $version in
      "$want_version"|"$want_version".*) ;;
      *) die "profile '$name' is for $want_id $want_version, this host runs $want_id $version ($release): set os" ;;
    esac
  fi
  if [ -n "$(field cmdline)" ]; then
    # shellcheck disable=SC2046
    set -- $(field bootloader | tr '\t' ' ')
    case ${1:-none} in
      grub-dropin)
        command -v "${2:-update-grub}" >/dev/null 2>&1 ||
          die "${2:-update-grub} not found: profile '$name' sets kernel parameters through GRUB" ;;
      grubby)
        command -v grubby >/dev/null 2>&1 ||
          die "grubby not found: profile '$name' sets kernel parameters on every boot entry with grubby" ;;
    esac
  fi
  # shellcheck disable=SC2046
  set -- $(field initramfs | tr '\t' ' ')
  if [ "${1:-none}" != none ] && has_flag initramfs; then
    command -v "$2" >/dev/null 2>&1 ||
      die "$2 not found: profile '$name' sets NVIDIA driver options, which the initramfs must carry (a driver \
loaded from it ignores /etc/modprobe.d)"
  fi
  requirements
  floors
  echo "this host matches profile '$name'"
}

has_flag() { # FLAG: some file of the profile has it
  awk -F'\t' -v f="$1" '$1 == "file" && ("," $4 ",") ~ ("," f ",") { found = 1 } END { exit !found }' "$PROFILE"
}

requirements() { # what the modules the profile loads need on this host
  # shellcheck disable=SC2013
  for need in $(awk -F'\t' '$1 == "requires" { print $2 ":" $3 }' "$PROFILE"); do
    what=${need%%:*}
    module=${need#*:}
    case $what in
      peer-memory)
        got=$(sh "$HERE/observe.sh" host:peer_memory | cut -f2)
        [ "$got" != none ] || die "profile '$(field name)' loads $module, which needs a peer-memory provider \
(MLNX_OFED or DOCA-OFED) that this host does not have (no ofed_info; ib_core exports no \
ib_register_peer_memory_client), so it would fail to load: set options gpudirect dmabuf, or install DOCA-OFED"
        echo "peer-memory provider for $module: $got" ;;
      gdrdrv)
        got=$(sh "$HERE/observe.sh" host:gdrdrv | cut -f2)
        [ "$got" = installed ] || die "profile '$(field name)' loads $module, which is not installed on this host \
(GDRCopy's kernel module package): install GDRCopy, or set options gdrcopy off" ;;
    esac
  done
}

floors() { # no limit sysctl is written below the value the host has now
  keys=$(awk -F'\t' '$1 == "floor" { print "sysctl:" $2 }' "$PROFILE")
  [ -n "$keys" ] || return 0
  mkdir -p "$DATA"
  # shellcheck disable=SC2086
  sh "$HERE/observe.sh" $keys > "$DATA/current"
  # A value NodeWright wrote itself before is not the host's own.
  cat "$DATA"/written/* 2>/dev/null | awk -F' = ' 'NF == 2 && $1 !~ /^#/ { print $1 "\t" $2 }' > "$DATA/ours"
  lower=$(awk -F'\t' '
    FILENAME == ARGV[1] { ours[$1] = $2; next }
    FILENAME == ARGV[2] { if ($1 ~ /^sysctl:/) now[substr($1, 8)] = $2; next }
    $1 == "floor" {
      key = $2; want = $3; have = now[key]
      if (have == "" || have == "<missing>" || ours[key] == have) next
      n = split(want, w, " "); m = split(have, h, " ")
      for (i = 1; i <= n && i <= m; i++) {
        if (h[i] !~ /^-?[0-9]+$/ || w[i] !~ /^-?[0-9]+$/) break
        if (h[i] + 0 > w[i] + 0) { printf "%s is %s on this host, the profile would lower it to %s; ", key, have, want; break }
        if (h[i] + 0 < w[i] + 0) break
      }
    }' "$DATA/ours" "$DATA/current" "$PROFILE")
  [ -z "$lower" ] || die "${lower}NodeWright never lowers a limit the host has: raise the value (extra), or add \
force: true to the setting to lower it on purpose"
}

initramfs_sum() { # the content the initramfs must carry: the driver option files
  awk -F'\t' '$1 == "file" && ("," $4 ",") ~ /,initramfs,/ { print "/" $3 }' "$PROFILE" |
    while read -r f; do cat "$f" 2>/dev/null; done | sha1sum | cut -d" " -f1
}

rebuild_initramfs() { # WHY
  # shellcheck disable=SC2046
  set -- $(cat "$DATA/initramfs-command" 2>/dev/null || true)
  [ "${1:-none}" != none ] || return 0
  shift
  echo "rebuilding the initramfs ($1): $*"
  "$@"
}

regenerate() { # ARGS GONE: the kernel parameters to set and to remove (grubby)
  args=$1
  gone=$2
  # shellcheck disable=SC2046
  set -- $(cat "$DATA/bootloader" 2>/dev/null || true)
  method=${1:-none}
  [ $# -gt 0 ] && shift
  case $method in
    grub-dropin)
      echo "regenerating the boot configuration: $*"
      "$@" ;;
    grubby)
      set -- --update-kernel=ALL
      if [ -n "$args" ]; then set -- "$@" "--args=$args"; fi
      if [ -n "$gone" ]; then set -- "$@" "--remove-args=$gone"; fi
      echo "grubby $*"
      grubby "$@" ;;
  esac
}

apply() {
  preflight
  mkdir -p "$DATA/written"
  field bootloader | tr '\t' ' ' > "$DATA/bootloader"
  field initramfs | tr '\t' ' ' > "$DATA/initramfs-command"
  reload=0
  regen=0
  initrd=0
  applied=""
  while IFS="$TAB" read -r tag key path flags drift removal; do
    [ "$tag" = file ] || continue
    dest=/$path
    if [ -f "$dest" ] && cmp -s "$CONFIG/$key" "$dest"; then
      cp "$CONFIG/$key" "$DATA/written/$key"
      continue
    fi
    if [ -f "$dest" ] && [ -f "$DATA/written/$key" ] && ! cmp -s "$DATA/written/$key" "$dest"; then
      echo "$dest was edited on this host since NodeWright wrote it: writing it again ($drift)"
      # shellcheck disable=SC2086
      request $drift
    fi
    mkdir -p "$(dirname "$dest")"
    cp "$CONFIG/$key" "$dest.nodewright-new"
    chmod 0644 "$dest.nodewright-new"
    mv -f "$dest.nodewright-new" "$dest"
    cp "$CONFIG/$key" "$DATA/written/$key"
    echo "wrote $dest"
    case ",$flags," in *,reload,*) reload=1 ;; esac
    case ",$flags," in *,bootloader,*) regen=1 ;; esac
    case ",$flags," in *,initramfs,*) initrd=1 ;; esac
    case ",$flags," in *,apply,*) applied="$applied $dest" ;; esac
  done < "$PROFILE"
  if [ -f "$DATA/files" ]; then
    while IFS="$TAB" read -r tag key path flags drift removal; do
      [ "$tag" = file ] || continue
      in_profile "$path" && continue
      rm -f "/$path" "$DATA/written/$key"
      prune_dir "/$path"
      echo "removed /$path: the profile no longer has it"
      # shellcheck disable=SC2086
      request $removal
      case ",$flags," in *,reload,*) reload=1 ;; esac
      case ",$flags," in *,bootloader,*) regen=1 ;; esac
      case ",$flags," in *,initramfs,*) initrd=1 ;; esac
    done < "$DATA/files"
  fi
  for f in $applied; do
    echo "applying $f now (this OS does not keep it across a reboot)"
    sysctl -p "$f" >/dev/null
  done
  # The initramfs carries a copy of the driver options: rebuilt when they changed, or
  # when it was not built from the ones in place (an earlier run that did not rebuild).
  sum=$(initramfs_sum)
  built=$(cat "$DATA/initramfs" 2>/dev/null || printf '' | sha1sum | cut -d" " -f1)
  if [ $initrd = 1 ] || [ "$sum" != "$built" ]; then
    rebuild_initramfs
    printf '%s\n' "$sum" > "$DATA/initramfs"
  fi
  tokens=$(field cmdline)
  old=$(cat "$DATA/cmdline" 2>/dev/null || true)
  gone=""
  for t in $old; do
    case " $tokens " in *" $t "*) ;; *) gone="${gone:+$gone }$t" ;; esac
  done
  case $(cut -d' ' -f1 "$DATA/bootloader") in
    grub-dropin) if [ $regen = 1 ]; then regenerate "" ""; fi ;;
    grubby) if [ "$tokens" != "$old" ]; then regenerate "$tokens" "$gone"; fi ;;
  esac
  printf '%s\n' "$tokens" > "$DATA/cmdline"
  if [ $reload = 1 ]; then
    echo "reloading systemd's unit files"
    systemctl daemon-reload
  fi
  awk -F'\t' '$1 == "file"' "$PROFILE" > "$DATA/files"
  if [ -n "$REQUESTS" ]; then
    # shellcheck disable=SC2086
    services=$(printf '%s\n' $REQUESTS | sort -u | tr '\n' ' ')
    echo "service $services" > "$NODEWRIGHT_INTERRUPT_FILE"
    echo "asking for a restart of $services"
  fi
  echo "profile '$(field name)' written; the interrupt follows the settings that changed"
}

written_check() {
  need_profile
  rc=0
  while IFS="$TAB" read -r tag key path flags drift removal; do
    [ "$tag" = file ] || continue
    if ! cmp -s "$CONFIG/$key" "/$path"; then
      echo "/$path does not hold what profile '$(field name)' says" >&2
      rc=1
    fi
  done < "$PROFILE"
  if [ -f "$DATA/files" ]; then
    while IFS="$TAB" read -r tag key path flags drift removal; do
      if ! in_profile "$path" && [ -e "/$path" ]; then
        echo "/$path is no longer in the profile but still there" >&2
        rc=1
      fi
    done < "$DATA/files"
  fi
  tokens=$(field cmdline)
  if [ -n "$tokens" ]; then
    case $(field bootloader | cut -f1) in
      grub-dropin)
        where=$(grub_cfg)
        args=$(grep -m 1 -E '^[[:space:]]*linux' "$where" 2>/dev/null || true) ;;
      grubby)
        where="grubby --info=DEFAULT"
        args=$(grubby --info=DEFAULT | sed -n 's/^args="\(.*\)"$/\1/p') ;;
      *)
        where=""
        args="" ;;
    esac
    if [ -n "$where" ]; then
      for t in $tokens; do
        case " $args " in
          *" $t "*) ;;
          *) echo "$where does not boot with $t" >&2; rc=1 ;;
        esac
      done
    fi
  fi
  # shellcheck disable=SC2046
  set -- $(field initramfs | tr '\t' ' ')
  if [ "${1:-none}" != none ] && [ "$(initramfs_sum)" != "$(cat "$DATA/initramfs" 2>/dev/null || printf '' | sha1sum | cut -d" " -f1)" ]; then
    echo "the initramfs was not rebuilt from the driver options in /etc/modprobe.d" >&2
    rc=1
  fi
  if [ $rc = 0 ]; then
    echo "every file of profile '$(field name)' is in place"
  fi
  # Settings applied as they are written (no interrupt follows, so no post-interrupt
  # check either) are read back here.
  if [ $rc = 0 ] && has_flag apply; then
    verify || rc=1
  fi
  return $rc
}

verify() {
  need_profile
  checks=$CONFIG/resolved.checks
  mkdir -p "$DATA"
  probes=$(awk -F'\t' '$3 != "skip" && $2 != "" { print $2 }' "$checks" | sort -u)
  # shellcheck disable=SC2086
  sh "$HERE/observe.sh" $probes > "$DATA/observed"
  rc=0
  sh "$HERE/verdict.sh" "$checks" "$DATA/observed" > "$DATA/verdict" || rc=$?
  out=$(awk -F'\t' '$1 == "unverified" { print "unverified " $2 ": " $3 } $1 == "summary" { print $2 }' "$DATA/verdict")
  if [ $rc != 0 ]; then
    printf '%s\n' "$out" >&2
    return 1
  fi
  printf '%s\n' "$out"
}

remove() {
  if [ ! -f "$DATA/files" ]; then
    echo "nothing was written"
    return 0
  fi
  reload=0
  regen=0
  initrd=0
  while IFS="$TAB" read -r tag key path flags drift removal; do
    [ "$tag" = file ] || continue
    if [ -e "/$path" ]; then
      rm -f "/$path"
      echo "removed /$path"
    fi
    prune_dir "/$path"
    case ",$flags," in *,reload,*) reload=1 ;; esac
    case ",$flags," in *,bootloader,*) regen=1 ;; esac
    case ",$flags," in *,initramfs,*) initrd=1 ;; esac
  done < "$DATA/files"
  if [ $initrd = 1 ]; then
    rebuild_initramfs
    rm -f "$DATA/initramfs"
  fi
  old=$(cat "$DATA/cmdline" 2>/dev/null || true)
  case $(cut -d' ' -f1 "$DATA/bootloader" 2>/dev/null || true) in
    grub-dropin) if [ $regen = 1 ]; then regenerate "" ""; fi ;;
    grubby) if [ -n "$old" ]; then regenerate "" "$old"; fi ;;
  esac
  if [ $reload = 1 ]; then systemctl daemon-reload; fi
  echo "kernel parameters, driver options, sysctls and loaded modules stay in effect until the next reboot"
}

removed_check() {
  rc=0
  if [ -f "$DATA/files" ]; then
    while IFS="$TAB" read -r tag key path flags drift removal; do
      if [ -e "/$path" ]; then echo "/$path is still there" >&2; rc=1; fi
    done < "$DATA/files"
  fi
  return $rc
}

case "${1:-}" in
  preflight) preflight ;;
  apply) apply ;;
  written-check) written_check ;;
  verify) verify ;;
  remove) remove ;;
  removed-check) removed_check ;;
  *) echo "usage: $0 preflight|apply|written-check|verify|remove|removed-check" >&2
     exit 2 ;;
esac
