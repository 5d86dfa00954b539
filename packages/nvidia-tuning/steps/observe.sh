# shellcheck shell=sh
# NodeWright NVIDIA tuning: read tuning settings back on a host. The package's
# post-interrupt check and the nodewright.fleet.nvidia_tuning role's check both run it.
# Run as: sh -c "$(cat observe.sh)" observe PROBE...   (inside a chroot of the host root)
# Prints one "PROBE<TAB>VALUE" line per probe. PROBE is a setting id
# (sysctl:KEY, module:NAME, modprobe:MODULE/OPTION, dropin:UNIT/DIRECTIVE,
# governor:cpu, gpu:persistence|fabricmanager|workload_power_profile), proc:cmdline, or a
# fact about the host: host:peer_memory (the provider, or none), host:gdrdrv (installed or
# absent), host:memory (MemTotal in kB), host:driver_container (present or absent).
# Read-only: it changes nothing on the host.

emit() { printf '%s\t%s\n' "$1" "$2"; }
one_line() { tr '\t\n' '  ' | sed -e 's/  */ /g' -e 's/^ //' -e 's/ $//'; }
or_unavailable() { if [ -n "$1" ]; then printf '%s' "$1"; else printf '<unavailable>'; fi; }

for probe in "$@"; do
  kind=${probe%%:*}
  key=${probe#*:}
  case $kind in
    sysctl)
      if value=$(sysctl -n "$key" 2>/dev/null); then
        emit "$probe" "$(printf '%s' "$value" | one_line)"
      else
        emit "$probe" "<missing>"
      fi ;;
    proc)
      emit "$probe" "$(one_line < "/proc/$key" 2>/dev/null)" ;;
    module)
      name=$(printf '%s' "$key" | tr '-' '_')
      if grep -q "^$name " /proc/modules 2>/dev/null || [ -d "/sys/module/$name" ]; then
        emit "$probe" loaded
      else
        emit "$probe" absent
      fi ;;
    modprobe)
      module=${key%%/*}
      option=${key#*/}
      dword=""
      case $option in *.*) dword=${option#*.}; option=${option%%.*} ;; esac
      value=""
      if [ "$module" = nvidia ] && [ -r /proc/driver/nvidia/params ]; then
        value=$(sed -n "s/^${option#NVreg_}: *//p" /proc/driver/nvidia/params | head -n 1 | tr -d '"')
      elif [ -r "/sys/module/$module/parameters/$option" ]; then
        value=$(tr -d '"' < "/sys/module/$module/parameters/$option")
      elif [ ! -d "/sys/module/$module" ]; then
        value="<module not loaded>"
      fi
      if [ -n "$dword" ] && [ "$value" != "<module not loaded>" ]; then
        # One key of a "KEY=VALUE;KEY=VALUE;" registry parameter.
        value=$(printf '%s' "$value" | tr ';' '\n' | sed -n "s/^ *$dword=//p" | head -n 1)
      fi
      emit "$probe" "$(or_unavailable "$value")" ;;
    dropin)
      unit=${key%%/*}
      directive=${key#*/}
      case $unit in
        *.link|*.network|*.netdev)
          value=$(cat "/etc/systemd/network/$unit.d/"*.conf 2>/dev/null | sed -n "s/^$directive=//p" | tail -n 1) ;;
        *)
          value=$(systemctl show "$unit" -p "$directive" --value 2>/dev/null) ;;
      esac
      emit "$probe" "$(or_unavailable "$value")" ;;
    governor)
      value=$(cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor 2>/dev/null | sort -u | one_line)
      emit "$probe" "$(or_unavailable "$value")" ;;
    gpu)
      case $key in
        persistence)
          value=$(nvidia-smi --query-gpu=persistence_mode --format=csv,noheader 2>/dev/null | sort -u | one_line) ;;
        fabricmanager)
          value=$(systemctl is-active nvidia-fabricmanager.service 2>/dev/null) ;;
        workload_power_profile)
          value=$(systemctl is-active nodewright-gpu-power-profile.service 2>/dev/null) ;;
        *)
          value="" ;;
      esac
      emit "$probe" "$(or_unavailable "$value")" ;;
    host)
      # Facts about the host that decide what NodeWright may write, not settings.
      case $key in
        peer_memory)
          # MLNX_OFED and DOCA-OFED ship ofed_info; their ib_core exports the peer-memory
          # API nvidia_peermem links against (the inbox ib_core does not).
          value=""
          if command -v ofed_info >/dev/null 2>&1; then
            value=$(ofed_info -s 2>/dev/null | head -n 1 | tr -d ':' | one_line)
          fi
          if [ -z "$value" ] && grep -q ' ib_register_peer_memory_client' /proc/kallsyms 2>/dev/null; then
            value="ib_core exports ib_register_peer_memory_client"
          fi
          emit "$probe" "${value:-none}" ;;
        gdrdrv)
          if modinfo gdrdrv >/dev/null 2>&1 ||
              find "/lib/modules/$(uname -r)" -name 'gdrdrv.ko*' 2>/dev/null | grep -q .; then
            emit "$probe" installed
          else
            emit "$probe" absent
          fi ;;
        memory)
          emit "$probe" "$(sed -n 's/^MemTotal: *\([0-9]*\) kB$/\1/p' /proc/meminfo 2>/dev/null | head -n 1)" ;;
        driver_container)
          # The GPU Operator's driver container shares its root at /run/nvidia/driver.
          if [ -d /run/nvidia/driver/usr ]; then emit "$probe" present; else emit "$probe" absent; fi ;;
        *)
          emit "$probe" "<unknown probe>" ;;
      esac ;;
    *)
      emit "$probe" "<unknown probe>" ;;
  esac
done
