# The simulator's initramfs: a text image per kernel listing the modules it carries
# and the modprobe.d options for them as they were when it was built. The simulated
# boot loads those modules with the options built into the image, as a real boot
# does, so a driver option written after the last rebuild does not take effect.
sim_initramfs_build() { # IMAGE KERNEL TOOL
  modules=$(cat /var/lib/nodewright-sim/initramfs-modules 2>/dev/null || true)
  {
    echo "# nodewright-sim initramfs for $2, built by $3"
    for m in $modules; do echo "module $m"; done
    cat /etc/modprobe.d/*.conf /lib/modprobe.d/*.conf 2>/dev/null | sed 's/#.*$//' |
      awk -v mods=" $modules " '$1 == "options" && index(mods, " " $2 " ") { $1 = $1; print }'
  } > "$1.new"
  mv "$1.new" "$1"
  sim_log "$3" "built $1"
}
sim_initramfs_kernels() { # the running kernel and the one the next boot starts
  cat /var/lib/nodewright-sim/kernel /var/lib/nodewright-sim/next-kernel 2>/dev/null | sort -u
}
