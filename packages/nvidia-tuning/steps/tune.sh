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
#   preflight      the host is the one the profile was resolved for
#   apply          write the files, remove those the profile no longer has, regenerate the
#                  boot configuration, reload systemd; ask for the restarts that files
#                  edited on the host need (never a reboot: reboots are planned)
#   written-check  every file holds what the profile says, the boot configuration has the
#                  kernel parameters
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
  echo "this host matches profile '$name'"
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
  reload=0
  regen=0
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
    done < "$DATA/files"
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
  if [ $rc = 0 ]; then
    echo "every file of profile '$(field name)' is in place"
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
  while IFS="$TAB" read -r tag key path flags drift removal; do
    [ "$tag" = file ] || continue
    if [ -e "/$path" ]; then
      rm -f "/$path"
      echo "removed /$path"
    fi
    prune_dir "/$path"
    case ",$flags," in *,reload,*) reload=1 ;; esac
    case ",$flags," in *,bootloader,*) regen=1 ;; esac
  done < "$DATA/files"
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
