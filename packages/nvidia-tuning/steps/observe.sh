# NodeWright NVIDIA tuning: read tuning settings back on a host. The package's
# post-interrupt check and the nodewright.fleet.nvidia_tuning role's check both run it.
# Run as: sh -c "$(cat observe.sh)" observe PROBE...   (inside a chroot of the host root)
# Prints one "PROBE<TAB>VALUE" line per probe. PROBE is a setting id
# (sysctl:KEY, module:NAME, modprobe:MODULE/OPTION, dropin:UNIT/DIRECTIVE,
# governor:cpu, gpu:persistence|fabricmanager|workload_power_profile) or proc:cmdline.
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
      value=""
      if [ "$module" = nvidia ] && [ -r /proc/driver/nvidia/params ]; then
        value=$(sed -n "s/^${option#NVreg_}: *//p" /proc/driver/nvidia/params | head -n 1 | tr -d '"')
      elif [ -r "/sys/module/$module/parameters/$option" ]; then
        value=$(cat "/sys/module/$module/parameters/$option")
      elif [ ! -d "/sys/module/$module" ]; then
        value="<module not loaded>"
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
    *)
      emit "$probe" "<unknown probe>" ;;
  esac
done
