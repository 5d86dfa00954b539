#!/usr/bin/env bash
# The system packages NodeWright's development set-up needs (bindep.txt: the lines
# for dpkg without a profile or with the "test" profile). Run by `make setup`, so by
# `make demo` and `make test` too.
#
# Nothing missing: says nothing. Missing, as root with apt-get: installs them, with a
# policy-rc.d that keeps their services from starting (the tests run their own
# registry), and leaves docker-registry's system service disabled and stopped.
# Missing otherwise: one line naming the packages and the command that installs
# them, exit status 1.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bindep=${NODEWRIGHT_BINDEP:-$here/bindep.txt}
registry_config=/etc/docker/registry/config.yml

have() { command -v "$1" >/dev/null 2>&1; }

static_busybox() {
  local bb
  bb=$(command -v busybox 2>/dev/null) || return 1
  if have file; then
    file -L "$bb" | grep -qE 'statically linked|static-pie'
  else
    if head -c 8192 "$bb" | grep -qa 'ld-linux'; then return 1; fi
  fi
}

# A package is there when what the project uses from it is: most ship a command of
# their own name.
present() {
  case $1 in
    busybox-static) static_busybox ;;
    procps) have ps ;;
    python3-venv) "${PY:-python3}" -c 'import ensurepip, venv' >/dev/null 2>&1 ;;
    fonts-dejavu-core) [ -d /usr/share/fonts/truetype/dejavu ] ;;
    containernetworking-plugins) [ -x /usr/lib/cni/bridge ] ;;
    *) have "$1" ;;
  esac
}

wanted() { # bindep.txt lines for dpkg, default or "test" profile
  local line name selectors platforms profiles word
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line%%#*}
    read -r name selectors <<<"$line" || true
    [ -n "$name" ] || continue
    selectors=${selectors#[}
    selectors=${selectors%]}
    platforms="" profiles=""
    for word in $selectors; do
      case $word in
        platform:*) platforms="$platforms ${word#platform:}" ;;
        *) profiles="$profiles $word" ;;
      esac
    done
    if [ -n "$platforms" ] && [[ " $platforms " != *" dpkg "* ]]; then continue; fi
    if [ -n "$profiles" ] && [[ " $profiles " != *" test "* ]]; then continue; fi
    echo "$name"
  done <"$bindep"
  # The virtualenv needs ensurepip, which Debian's own python3 ships separately.
  if [ ! -x "$here/.venv/bin/python" ]; then echo python3-venv; fi
}

registry_service_pids() { # docker-registry processes serving the package's own config
  local cmdline pid
  for cmdline in /proc/[0-9]*/cmdline; do
    pid=${cmdline#/proc/}
    pid=${pid%/cmdline}
    # A process may be gone by the time it is read.
    if { tr '\0' ' ' <"$cmdline"; } 2>/dev/null | grep -q "docker-registry.* $registry_config"; then
      echo "$pid"
    fi
  done
}

missing=()
while IFS= read -r pkg; do
  present "$pkg" || missing+=("$pkg")
done < <(wanted)
[ ${#missing[@]} -gt 0 ] || exit 0

if [ "$(id -u)" != 0 ] || ! have apt-get; then
  if have apt-get; then how="sudo apt-get install -y ${missing[*]}"
  else how="your system's package manager (Debian/Ubuntu: apt-get install -y ${missing[*]})"; fi
  echo "nodewright: missing system packages: ${missing[*]}; install them with $how, then run make again" >&2
  exit 1
fi

echo "nodewright: installing system packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# Written by NodeWright set-up while it installs packages: no service starts.\nexit 101\n' >"$policy"
  chmod 0755 "$policy"
  trap 'rm -f "$policy"' EXIT
fi
before=$(registry_service_pids | tr '\n' ' ')
if ! { apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }; then
  echo "nodewright: apt-get could not install ${missing[*]}; see apt-get's message above" >&2
  exit 1
fi
if [[ " ${missing[*]} " == *" docker-registry "* ]]; then
  # The tests start registries of their own; the package's service is not wanted.
  if have deb-systemd-helper; then deb-systemd-helper disable docker-registry.service >/dev/null 2>&1 || true; fi
  if have update-rc.d; then update-rc.d docker-registry disable >/dev/null 2>&1 || true; fi
  for pid in $(registry_service_pids); do
    [[ " $before " == *" $pid "* ]] || kill "$pid" 2>/dev/null || true
  done
fi
still=()
for pkg in "${missing[@]}"; do present "$pkg" || still+=("$pkg"); done
if [ ${#still[@]} -gt 0 ]; then
  echo "nodewright: apt-get installed ${missing[*]} but ${still[*]} is still not usable (see bindep.txt)" >&2
  exit 1
fi
echo "nodewright: installed ${missing[*]}" >&2
