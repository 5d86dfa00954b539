# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The simulator's node host roots without a cluster: its systemd (unit files and
drop-ins, enablement, units that really run, daemon-reload, the boot), the CPU
governor, GPU persistence and power profiles, the crash-kernel reservation, the
package database, and what the simulator says when this machine lacks something."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from nodewright_sim import hostroot

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def sh(root, command):
    """(exit status, stdout, stderr) of a shell command in the host root."""
    proc = hostroot.run(root, command)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def out(root, command):
    rc, stdout, stderr = sh(root, command)
    assert rc == 0, (command, rc, stdout, stderr)
    return stdout


def write(root, path, text):
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as fh:
        fh.write(text)


def read(root, path):
    with open(os.path.join(root, path.lstrip("/"))) as fh:
        return fh.read()


GOVERNOR_UNIT = """[Unit]
Description=CPU governor
ConditionPathExists=/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'for g in /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor; do echo performance > "$$g"; done'

[Install]
WantedBy=multi-user.target
"""


# ------------------------------------------------------------------ systemctl show

def test_show_reports_limits_from_the_unit_and_its_drop_ins(root):
    # containerd's own unit sets LimitNPROC and LimitCORE; the rest are systemd's defaults.
    assert out(root, "systemctl show containerd -p LimitNOFILE -p LimitMEMLOCK -p LimitNPROC") == \
        "LimitNOFILE=524288\nLimitNPROC=infinity\nLimitMEMLOCK=8388608"
    write(root, "/etc/systemd/system/containerd.service.d/50-site.conf",
          "[Service]\nLimitNOFILE=65536\nLimitSTACK=32M\n")
    write(root, "/etc/systemd/system/containerd.service.d/90-tuning.conf",
          "[Service]\n# later drop-ins win\nLimitNOFILE=1048576\nLimitMEMLOCK=infinity\nLimitSTACK=67108864\n")
    # Not loaded yet: systemd shows what it loaded, and says it needs a reload.
    assert out(root, "systemctl show containerd.service -p LimitNOFILE,NeedDaemonReload") == \
        "LimitNOFILE=524288\nNeedDaemonReload=yes"
    out(root, "systemctl daemon-reload")
    assert out(root, "systemctl show containerd -p LimitNOFILE -p LimitMEMLOCK -p LimitSTACK --value") == \
        "67108864\n1048576\ninfinity"
    assert out(root, "systemctl show containerd -p LimitNOFILESoft -p NeedDaemonReload") == \
        "LimitNOFILESoft=1048576\nNeedDaemonReload=no"
    assert out(root, "systemctl show containerd -p DropInPaths --value") == (
        "/etc/systemd/system/containerd.service.d/50-site.conf "
        "/etc/systemd/system/containerd.service.d/90-tuning.conf")
    # soft:hard, and an empty assignment back to the default
    write(root, "/etc/systemd/system/containerd.service.d/95-more.conf",
          "[Service]\nLimitNOFILE=4096:8192\nLimitMEMLOCK=\n")
    out(root, "systemctl daemon-reload")
    assert out(root, "systemctl show containerd -p LimitNOFILE -p LimitNOFILESoft -p LimitMEMLOCK") == \
        "LimitNOFILE=8192\nLimitNOFILESoft=4096\nLimitMEMLOCK=8388608"


def test_a_drop_in_in_etc_hides_the_same_name_in_usr_lib(root):
    assert "ExecStart={ path=/usr/bin/kubelet ; argv[]=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS" in out(
        root, "systemctl show kubelet -p ExecStart")  # 10-kubeadm.conf resets ExecStart= and sets its own
    write(root, "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf",
          "[Service]\nExecStart=\nExecStart=/usr/bin/kubelet --site\n")
    out(root, "systemctl daemon-reload")
    assert out(root, "systemctl show kubelet -p DropInPaths --value") == \
        "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf"
    assert "argv[]=/usr/bin/kubelet --site ;" in out(root, "systemctl show kubelet -p ExecStart")


def test_show_of_a_unit_that_does_not_exist(root):
    assert out(root, "systemctl show nosuch.service -p LoadState -p ActiveState") == \
        "LoadState=not-found\nActiveState=inactive"


# ------------------------------------------------------------------ enablement

def test_enable_disable_and_is_enabled_follow_the_install_section(root):
    assert sh(root, "systemctl is-enabled containerd.service") == (0, "enabled", "")
    assert sh(root, "systemctl is-enabled systemd-sysctl.service") == (0, "static", "")
    assert sh(root, "systemctl is-enabled nvidia-persistenced")[:2] == (1, "disabled")
    assert sh(root, "systemctl is-enabled nosuch.service")[:2] == (4, "not-found")
    rc, _, err = sh(root, "systemctl enable nvidia-persistenced")
    assert rc == 0 and "Created symlink /etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service " \
                       "→ /usr/lib/systemd/system/nvidia-persistenced.service." in err
    assert os.path.islink(os.path.join(root, "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service"))
    assert sh(root, "systemctl is-enabled nvidia-persistenced")[:2] == (0, "enabled")
    rc, _, err = sh(root, "systemctl enable systemd-sysctl")
    assert rc == 0 and "The unit files have no installation config" in err
    assert sh(root, "systemctl disable nvidia-persistenced")[0] == 0
    assert sh(root, "systemctl is-enabled nvidia-persistenced")[:2] == (1, "disabled")
    assert sh(root, "systemctl enable nosuch") == (1, "", "Failed to enable unit: Unit file nosuch.service does not exist.")
    assert sh(root, "systemctl mask kubelet")[0] == 0
    assert sh(root, "systemctl is-enabled kubelet")[:2] == (1, "masked")
    assert sh(root, "systemctl start kubelet") == (1, "", "Failed to start kubelet.service: Unit kubelet.service is masked.")


# ------------------------------------------------------------------ units that run

def test_a_oneshot_unit_runs_its_commands_in_the_host_root(root):
    write(root, "/etc/systemd/system/marker.service",
          "[Service]\nType=oneshot\nRemainAfterExit=yes\nEnvironment=WHO=node\n"
          "ExecStartPre=-/bin/false\nExecStart=/bin/sh -c 'echo \"hello $${WHO}\" > /var/lib/marker'\n"
          "ExecStop=/bin/rm -f /var/lib/marker\n")
    assert sh(root, "systemctl is-active marker")[:2] == (3, "inactive")
    assert sh(root, "systemctl start marker")[0] == 0
    assert read(root, "/var/lib/marker") == "hello node\n"
    assert out(root, "systemctl is-active marker") == "active"
    assert out(root, "systemctl show marker -p ActiveState -p SubState") == "ActiveState=active\nSubState=exited"
    assert sh(root, "systemctl stop marker")[0] == 0
    assert not os.path.exists(os.path.join(root, "var/lib/marker"))


def test_restarts_are_counted_from_the_boot(root):
    restarts = "/run/nodewright-sim/units/containerd.service.restarts"
    assert out(root, "systemctl is-active containerd") == "active"
    assert not os.path.exists(os.path.join(root, restarts.lstrip("/")))
    out(root, "systemctl restart containerd")
    out(root, "systemctl restart containerd.service")
    assert len(read(root, restarts).splitlines()) == 2
    hostroot.boot(root)
    assert not os.path.exists(os.path.join(root, restarts.lstrip("/")))


def test_a_failing_unit_fails_its_job_and_an_unmet_condition_skips_it(root):
    write(root, "/etc/systemd/system/broken.service", "[Service]\nType=oneshot\nExecStart=/bin/false\n")
    rc, _, err = sh(root, "systemctl restart broken")
    assert rc == 1 and "Job for broken.service failed because the control process exited with error code." in err
    assert sh(root, "systemctl is-failed broken")[:2] == (0, "failed")
    write(root, "/etc/systemd/system/gated.service",
          "[Unit]\nConditionPathExists=/dev/nvidia-caps-missing\n[Service]\nType=oneshot\nRemainAfterExit=yes\n"
          "ExecStart=/bin/touch /var/lib/gated\n")
    assert sh(root, "systemctl start gated")[0] == 0
    assert sh(root, "systemctl is-active gated")[1] == "inactive"
    assert not os.path.exists(os.path.join(root, "var/lib/gated"))
    # A daemon is active when its program is there; systemd fails it (203/EXEC) when not.
    write(root, "/etc/systemd/system/agent.service", "[Service]\nExecStart=/opt/agent/agentd --serve\n")
    assert sh(root, "systemctl start agent")[0] == 0
    assert sh(root, "systemctl is-active agent")[1] == "failed"
    assert "Failed to locate executable /opt/agent/agentd" in out(root, "journalctl -u agent")
    assert sh(root, "systemctl start nosuch") == (5, "", "Failed to start nosuch.service: Unit nosuch.service not found.")


def test_boot_runs_enabled_oneshot_units_and_resets_the_governor(root):
    gov = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"
    assert read(root, gov).strip() == "powersave"
    assert read(root, "/sys/devices/system/cpu/cpu0/cpufreq/scaling_available_governors").split() == [
        "performance", "powersave"]
    write(root, "/etc/systemd/system/governor.service", GOVERNOR_UNIT)
    hostroot.boot(root)
    assert read(root, gov).strip() == "powersave", "a unit that is not enabled does not run at boot"
    out(root, "systemctl enable governor")
    assert read(root, gov).strip() == "powersave", "enabling does not start it"
    hostroot.boot(root)
    assert read(root, gov).strip() == "performance"
    assert out(root, "systemctl is-active governor") == "active"
    out(root, "systemctl disable governor")
    hostroot.boot(root)
    assert read(root, gov).strip() == "powersave"
    # A unit pulled in by a Wants= drop-in of multi-user.target runs at boot too.
    write(root, "/etc/systemd/system/multi-user.target.d/90-site.conf", "[Unit]\nWants=governor.service\n")
    hostroot.boot(root)
    assert read(root, gov).strip() == "performance"
    # Written at run time only: gone at the next boot.
    os.unlink(os.path.join(root, "etc/systemd/system/multi-user.target.d/90-site.conf"))
    hostroot.boot(root)
    out(root, "echo performance > %s" % gov)
    hostroot.boot(root)
    assert read(root, gov).strip() == "powersave"


def test_boot_applies_sysctl_d_and_modules_load_d_through_their_units(root):
    write(root, "/etc/sysctl.d/80-site.conf", "vm.swappiness = 7\nnet.ipv4.tcp_rmem = 4096 87380 268435456\n")
    write(root, "/etc/modules-load.d/80-site.conf", "# RDMA\nib_umad\n")
    out(root, "sysctl -w vm.max_map_count=262144")
    hostroot.boot(root)
    assert out(root, "sysctl -n vm.swappiness") == "7"
    assert out(root, "sysctl -n net.ipv4.tcp_rmem") == "4096\t87380\t268435456"  # as the kernel prints it
    # A runtime-only change is gone: the distribution's 10-map-count.conf applies again.
    assert out(root, "sysctl -n vm.max_map_count") == "1048576", "a runtime-only change is gone"
    assert "ib_umad " in read(root, "/proc/modules")
    assert out(root, "systemctl is-active systemd-modules-load systemd-sysctl") == "active\nactive"


# ------------------------------------------------------------------ GPUs

def test_persistence_mode_follows_nvidia_persistenced_and_resets_at_boot(root):
    query = "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader | sort -u"
    assert out(root, query) == "Disabled"
    out(root, "nvidia-smi -pm 1")
    assert out(root, query) == "Enabled"
    hostroot.boot(root)
    assert out(root, query) == "Disabled"
    out(root, "systemctl start nvidia-persistenced")
    assert out(root, query) == "Enabled"
    out(root, "systemctl stop nvidia-persistenced")  # ExecStopPost removes /var/run/nvidia-persistenced
    assert out(root, query) == "Disabled"
    out(root, "systemctl enable nvidia-persistenced")
    hostroot.boot(root)
    assert out(root, query) == "Enabled"


def test_workload_power_profiles_on_blackwell_only_until_the_next_boot(root, gb200_root):
    rc, _, err = sh(root, "nvidia-smi workload-power-profile --set --profile-id 7")
    assert rc == 3 and "not supported" in err  # Hopper
    out(gb200_root, "/usr/bin/nvidia-smi workload-power-profile --set --profile-id 7")
    out(gb200_root, "nvidia-smi workload-power-profile --set --profile-id 6")
    assert out(gb200_root, "nvidia-smi workload-power-profile --get -i 0") == \
        "GPU 00000000:18:00.0: requested profiles: LLM_INFERENCE (6), LLM_TRAINING (7)"
    assert sh(gb200_root, "nvidia-smi workload-power-profile --set --profile-id 99")[0] == 2
    hostroot.boot(gb200_root)
    assert out(gb200_root, "nvidia-smi workload-power-profile --get -i 0") == \
        "GPU 00000000:18:00.0: requested profiles: none"


def test_fabric_manager_runs_on_hgx_boards_only(root, gb200_root):
    assert sh(root, "systemctl start nvidia-fabricmanager")[0] == 0  # HGX H100: four NVSwitches
    assert out(root, "systemctl is-active nvidia-fabricmanager") == "active"
    assert sh(gb200_root, "systemctl start nvidia-fabricmanager")[0] == 5  # a GB200 tray has no Fabric Manager
    assert out(gb200_root, "dpkg-query -W nvidia-compute-utils-580 >/dev/null && echo yes") == "yes"


def test_the_gpu_driver_is_loaded_with_its_initramfs_options_at_boot(gb200_root):
    param = os.path.join(gb200_root, "sys/module/nvidia/parameters/NVreg_CoherentGPUMemoryMode")
    write(gb200_root, "/etc/modprobe.d/90-site.conf", "options nvidia NVreg_CoherentGPUMemoryMode=driver\n")
    assert not os.path.exists(param)
    # The driver loads from the initramfs: modprobe.d options it was not rebuilt with are ignored.
    hostroot.boot(gb200_root)
    assert not os.path.exists(param)
    out(gb200_root, "update-initramfs -u -k all")
    hostroot.boot(gb200_root)
    assert read(gb200_root, "/sys/module/nvidia/parameters/NVreg_CoherentGPUMemoryMode").strip() == "driver"
    assert sorted(n for n in os.listdir(os.path.join(gb200_root, "dev")) if n.startswith("nvidia")) == [
        "nvidia-modeset", "nvidia-uvm", "nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl"]


# ------------------------------------------------------------------ crash kernel

@pytest.mark.parametrize("cmdline,memory_gib,size_mib", [
    ("ro quiet", 2048, 0),
    ("ro crashkernel=512M", 2048, 512),
    ("ro crashkernel=256M@16M quiet", 64, 256),
    ("crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M", 2048, 512),
    ("crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M", 16, 256),
    ("crashkernel=1G-4G:192M,4G-64G:256M", 128, 0),
    ("crashkernel=2G,high", 2048, 2048),
    ("crashkernel=bogus", 2048, 0),
])
def test_crash_kernel_reservation(cmdline, memory_gib, size_mib):
    assert hostroot.crash_kernel_size(cmdline, memory_gib << 30) == size_mib << 20


def test_the_reservation_shows_after_a_boot_with_crashkernel_and_kexec_needs_it(root):
    out(root, "apt-get install -y kdump-tools")
    assert out(root, "dpkg-query -W -f '${Version}' kexec-tools") == "1:2.0.27-1ubuntu2"  # its dependency
    assert read(root, "/sys/kernel/kexec_crash_size").strip() == "0"
    rc, _, err = sh(root, "kexec -p /boot/vmlinuz-%s" % hostroot.DEFAULT_KERNEL)
    assert rc == 1 and "Memory for crashkernel is not reserved" in err
    write(root, "/etc/default/grub.d/90-kdump.cfg", 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT '
                                                    'crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M"\n')
    assert read(root, "/sys/kernel/kexec_crash_size").strip() == "0"
    out(root, "update-grub")
    out(root, "systemctl enable kdump-tools")
    hostroot.boot(root)
    assert "crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M" in read(root, "/proc/cmdline")
    assert read(root, "/sys/kernel/kexec_crash_size").strip() == str(512 << 20)
    assert read(root, "/sys/kernel/kexec_crash_loaded").strip() == "1"  # kdump-tools.service loaded it
    assert out(root, "kdump-config status") == "current state   : ready to kdump"
    out(root, "apt-get remove -y kdump-tools")  # stops the service, takes its files away, keeps /etc
    assert read(root, "/sys/kernel/kexec_crash_loaded").strip() == "0"
    assert not os.path.exists(os.path.join(root, "usr/lib/systemd/system/kdump-tools.service"))
    assert os.path.exists(os.path.join(root, "etc/default/kdump-tools"))


# ------------------------------------------------------------------ package database

def test_apt_get_options_with_values_are_not_package_names(root):
    rc, stdout, stderr = sh(root, "apt-get -o Dpkg::Options::=--force-confold -q -y install "
                                  "-o APT::Get::Assume-Yes=true kdump-tools")
    assert rc == 0, stderr
    installed = read(root, "/var/lib/nodewright-sim/pkgdb/installed")
    assert "kdump-tools 1:1.8.1ubuntu1" in installed
    assert "Dpkg" not in installed and "APT" not in installed
    assert sh(root, "apt-get install -t noble-updates no-such-package")[0] == 100


# ------------------------------------------------------------------ what this machine lacks

def test_missing_prerequisites_are_named_with_the_fix(tmp_path):
    empty = str(tmp_path / "empty-bin")
    os.makedirs(empty)
    assert hostroot.missing_prerequisites(path=empty) == ["busybox-static", "bash", "dash", "libc-bin", "coreutils"]
    assert hostroot.missing_prerequisites() == []
    with pytest.raises(hostroot.HostRootError) as caught:
        hostroot.check_prerequisites(path=empty)
    message = str(caught.value)
    assert "\n" not in message
    assert "need busybox-static, bash, dash, libc-bin, coreutils" in message
    assert "apt-get install -y busybox-static bash dash libc-bin coreutils" in message


def test_a_dynamic_busybox_is_not_enough(tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "busybox").symlink_to("/bin/bash")  # dynamically linked
    for name in ("file", "bash", "dash", "ldd", "chroot"):
        (fake / name).symlink_to(subprocess.run(["which", name], capture_output=True, text=True).stdout.strip())
    assert hostroot.missing_prerequisites(path=str(fake)) == ["busybox-static"]


def test_up_without_a_prerequisite_says_so_in_one_line_and_leaves_nothing(tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    state = tmp_path / "state"
    env = dict(os.environ, PATH=str(empty), NODEWRIGHT_SIM_DIR=str(state))
    proc = subprocess.run([sys.executable, "-m", "nodewright_sim", "--name", "prereq-test", "up"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("nodewright-sim: the simulator's node host roots need busybox-static")
    assert "Traceback" not in proc.stderr
    assert not (state / "prereq-test").exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(state) not in ps


def test_up_without_the_control_plane_binaries_says_so_in_one_line(tmp_path):
    state = tmp_path / "state"
    env = dict(os.environ, NODEWRIGHT_SIM_BIN=str(tmp_path), NODEWRIGHT_SIM_DIR=str(state))
    proc = subprocess.run([sys.executable, "-m", "nodewright_sim", "--name", "nobin-test", "up"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("nodewright-sim: missing simulator binaries in %s: etcd, kube-apiserver" % tmp_path)
    assert "run `make binaries`" in proc.stderr
    assert not (state / "nobin-test").exists()


def _script_env(tmp_path, uid):
    """A PATH with the tools the set-up script uses, an `id` that says ``uid`` and an
    apt-get that records being called."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("bash", "dirname", "grep", "head", "tr", "cat"):
        (bin_dir / name).symlink_to(subprocess.run(["which", name], capture_output=True, text=True).stdout.strip())
    (bin_dir / "id").write_text("#!/bin/sh\necho %d\n" % uid)
    (bin_dir / "apt-get").write_text("#!/bin/sh\necho called >> %s/apt-get.calls\nexit 99\n" % tmp_path)
    for name in ("id", "apt-get"):
        (bin_dir / name).chmod(0o755)
    bindep = tmp_path / "bindep.txt"
    bindep.write_text("skopeo [platform:rpm platform:dpkg]\nbash [platform:dpkg test]\n"
                      "nodewright-no-such-tool [platform:dpkg test]\nrpm-only [platform:rpm test]\n"
                      "docs-only [platform:dpkg doc]\n")
    return dict(os.environ, PATH=str(bin_dir), NODEWRIGHT_BINDEP=str(bindep))


@pytest.mark.parametrize("uid,fix", [(1000, "install them with sudo apt-get install -y skopeo nodewright-no-such-tool"),
                                     (0, None)])
def test_system_packages_script_names_what_is_missing(tmp_path, uid, fix):
    env = _script_env(tmp_path, uid)
    if fix is None:  # root without apt-get
        os.unlink(os.path.join(env["PATH"], "apt-get"))
        fix = "install them with your system's package manager (Debian/Ubuntu: apt-get install -y skopeo " \
              "nodewright-no-such-tool)"
    proc = subprocess.run(["bash", os.path.join(REPO, "simulator", "system-packages.sh")], capture_output=True,
                          text=True, env=env)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr == "nodewright: missing system packages: skopeo nodewright-no-such-tool; %s, then run " \
                          "make again\n" % fix
    assert not (tmp_path / "apt-get.calls").exists()


def test_system_packages_script_is_quiet_when_nothing_is_missing():
    proc = subprocess.run(["bash", os.path.join(REPO, "simulator", "system-packages.sh")], capture_output=True,
                          text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
