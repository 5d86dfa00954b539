# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Every package shipped in packages/ through its whole lifecycle on a simulator
host root: apply and check, rerun, config change without a reapply, upgrade,
downgrade, uninstall; then what each one does that the others do not."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile

import pytest
from nodewright_sim import hostroot

from ansible_collections.nodewright.fleet.plugins.module_utils.package.runner import StepFailed, run_packages

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SHIPPED = os.path.join(REPO, "packages")
NOOP = {"type": "noop", "services": []}
REBOOT = {"type": "reboot", "services": []}



def sh(root, command):
    result = hostroot.run(root, command)
    return result.stdout.strip()


def read(root, path):
    with open(os.path.join(root, path.lstrip("/"))) as fh:
        return fh.read()


def exists(root, path):
    return os.path.lexists(os.path.join(root, path.lstrip("/")))


def version_of(name, tmp_path, version):
    """The shipped package under another version number (to upgrade and downgrade)."""
    dest = str(tmp_path / ("%s-%s" % (name, version)))
    shutil.copytree(os.path.join(SHIPPED, name), dest)
    path = os.path.join(dest, "package.json")
    with open(path) as fh:
        data = json.load(fh)
    data["version"] = version
    with open(path, "w") as fh:
        json.dump(data, fh)
    return dest


def apply(root, src, config, **kw):
    return run_packages([{"src": src, "config": config}], host_root=root, resource="fleet", **kw)


def perform_interrupt(root, result):
    """What the safe sequence does between the two phases."""
    interrupt = result["interrupt"]
    if interrupt["type"] == "noop":
        return result
    if interrupt["type"] == "reboot":
        hostroot.boot(root)
    for service in interrupt["services"]:
        sh(root, "systemctl restart %s" % service)
    done = run_packages([], host_root=root, resource="fleet", phase="post-interrupt")
    assert done["state"]["status"] == "complete", done["state"]
    return done


def shellscript_config(greeting):
    return {
        "apply.sh": "mkdir -p /etc/hello && echo hi > /etc/hello/msg && echo x >> /var/lib/hello-applied",
        "apply-check.sh": "grep -q hi /etc/hello/msg",
        "config.sh": '#!/bin/bash\ncp "$NODEWRIGHT_CONFIG_DIR/greeting" /etc/hello/greeting',
        "config-check.sh": 'cmp "$NODEWRIGHT_CONFIG_DIR/greeting" /etc/hello/greeting',
        "upgrade.sh": 'echo "from $NODEWRIGHT_PREVIOUS_VERSION" > /etc/hello/upgraded',
        "upgrade-check.sh": "test -f /etc/hello/upgraded",
        "uninstall.sh": "rm -rf /etc/hello",
        "uninstall-check.sh": "test ! -e /etc/hello",
        "greeting": greeting,
    }


def setup_agent(root):
    sh(root, "mkdir -p /opt/agent && printf '#!/bin/sh\\nexec sleep 1000\\n' > /opt/agent/agentd")


def agent_running(root, args):
    unit = read(root, "/etc/systemd/system/security-agent.service")
    assert "ExecStart=/usr/local/bin/security-agent %s" % args in unit
    assert sh(root, "systemctl is-active security-agent") == "active"
    assert sh(root, "systemctl is-enabled security-agent") == "enabled"


def kdump_reserved(root):
    assert "crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M" in read(root, "/proc/cmdline")
    # The kernel reserved 512 MiB (the node has 2 TiB) and kdump-tools loaded the crash kernel.
    assert read(root, "/sys/kernel/kexec_crash_size").strip() == str(512 << 20)
    assert read(root, "/sys/kernel/kexec_crash_loaded").strip() == "1"
    assert sh(root, "systemctl is-active kdump-tools") == "active"


def kdump_gone(root):
    assert not exists(root, "/etc/default/grub.d/90-nodewright-kdump.cfg")
    assert "crashkernel" not in read(root, "/boot/grub/grub.cfg")
    assert sh(root, "dpkg-query -W kdump-tools 2>/dev/null; echo $?") == "1"
    # Removing the tooling the package installed took its unit away and unloaded the crash kernel.
    assert sh(root, "systemctl is-enabled kdump-tools.service; echo $?") == "not-found\n4"
    assert sh(root, "systemctl is-active kdump-tools.service") == "inactive"
    assert read(root, "/sys/kernel/kexec_crash_loaded").strip() == "0"


# name: (setup, config a, config b, check a, check b, check uninstalled,
#        interrupt of apply, interrupt of the change from a to b)
LIFECYCLE = {
    "shellscript": (
        None, shellscript_config("hello"), shellscript_config("bonjour"),
        lambda r: read(r, "/etc/hello/greeting") == "hello",
        lambda r: read(r, "/etc/hello/greeting") == "bonjour",
        lambda r: not exists(r, "/etc/hello"),
        NOOP, NOOP),
    "sysctl": (
        None, {"vm.swappiness": "10", "net.core.somaxconn": 8192}, {"vm.swappiness": "20"},
        lambda r: sh(r, "sysctl -n vm.swappiness net.core.somaxconn") == "10\n8192",
        lambda r: sh(r, "sysctl -n vm.swappiness net.core.somaxconn") == "20\n4096",
        lambda r: sh(r, "sysctl -n vm.swappiness") == "60" and not exists(r, "/etc/sysctl.d/90-nodewright-sysctl.conf"),
        NOOP, NOOP),
    "cve-remediation": (
        None, {"openssl": "3.0.13-0ubuntu3.4"}, {"openssl": "3.0.13-0ubuntu3.4", "containerd": "1.7.27-0ubuntu1"},
        lambda r: sh(r, "dpkg-query -W -f '${Version}' openssl") == "3.0.13-0ubuntu3.4",
        lambda r: sh(r, "dpkg-query -W -f '${Version}' containerd") == "1.7.27-0ubuntu1",
        lambda r: not exists(r, "/var/lib/nodewright/data/cve-remediation")
        and sh(r, "dpkg-query -W -f '${Version}' openssl") == "3.0.13-0ubuntu3.4",
        NOOP, NOOP),
    "security-agent": (
        setup_agent, {"artifact": "/opt/agent/agentd", "args": "--mode a"},
        {"artifact": "/opt/agent/agentd", "args": "--mode b"},
        lambda r: agent_running(r, "--mode a") or True,
        lambda r: agent_running(r, "--mode b") or True,
        lambda r: not exists(r, "/etc/systemd/system/security-agent.service")
        and not exists(r, "/usr/local/bin/security-agent") and sh(r, "systemctl is-active security-agent") == "inactive",
        NOOP, NOOP),
    "kdump": (
        None, {}, {"coredir": "/var/crash/nodewright"},
        lambda r: kdump_reserved(r) or True,
        lambda r: kdump_reserved(r) is None and 'KDUMP_COREDIR="/var/crash/nodewright"' in read(
            r, "/etc/default/kdump-tools") and os.path.isdir(os.path.join(r, "var/crash/nodewright")),
        lambda r: kdump_gone(r) or True,
        REBOOT, {"type": "service", "services": ["kdump-tools.service"]}),
}


@pytest.mark.parametrize("name", sorted(LIFECYCLE))
def test_lifecycle(name, root, tmp_path):
    setup, config_a, config_b, check_a, check_b, check_gone, apply_interrupt, change_interrupt = LIFECYCLE[name]
    src = os.path.join(SHIPPED, name)
    if setup:
        setup(root)

    applied = apply(root, src, config_a)
    assert [r["stages"] for r in applied["results"]] == [["apply", "config"]]
    assert applied["interrupt"] == apply_interrupt
    perform_interrupt(root, applied)
    assert check_a(root)

    again = apply(root, src, config_a)
    assert not again["changed"], "a rerun is idempotent"

    changed = apply(root, src, config_b)
    assert [(r["action"], r["stages"]) for r in changed["results"]] == [("config", ["config"])], "no reapply"
    assert changed["interrupt"] == change_interrupt
    perform_interrupt(root, changed)
    assert check_b(root)

    upgraded = apply(root, version_of(name, tmp_path, "1.1.0"), config_b)
    assert [(r["action"], r["stages"]) for r in upgraded["results"]] == [("upgrade", ["upgrade", "config"])]
    perform_interrupt(root, upgraded)
    assert check_b(root)
    assert upgraded["state"]["packages"][name]["version"] == "1.1.0"

    downgraded = apply(root, src, config_b)
    assert [(r["action"], r["stages"]) for r in downgraded["results"]] == [
        ("downgrade", ["uninstall", "apply", "config"])]
    perform_interrupt(root, downgraded)
    assert check_b(root)

    removed = run_packages([{"name": name, "state": "absent"}], host_root=root, resource="fleet")
    assert [(r["action"], r["stages"]) for r in removed["results"]] == [("uninstall", ["uninstall"])]
    assert removed["state"] == {"packages": {}, "status": "complete"}
    assert check_gone(root)


def test_sysctl_unknown_parameter_fails_with_its_name(root):
    with pytest.raises(StepFailed) as caught:
        apply(root, os.path.join(SHIPPED, "sysctl"), {"kernel.sched_latency_ns": "1000000"})
    assert "kernel parameter kernel.sched_latency_ns does not exist on this kernel" in str(caught.value)


def test_sysctl_values_survive_a_reboot(root):
    apply(root, os.path.join(SHIPPED, "sysctl"), {"vm.max_map_count": "1048576"})
    hostroot.boot(root)
    assert sh(root, "sysctl -n vm.max_map_count") == "1048576"


def test_cve_kernel_fix_asks_for_a_reboot_only_when_the_running_kernel_is_older(root):
    src = os.path.join(SHIPPED, "cve-remediation")
    current = apply(root, src, {"kernel": "6.8.0-45-generic"})
    assert current["interrupt"] == NOOP

    newer = apply(root, src, {"kernel": "6.8.0-51-generic"})
    assert newer["interrupt"] == REBOOT
    assert newer["results"][0]["requested_interrupt"] == REBOOT
    assert sh(root, "dpkg-query -W -f '${Version}' linux-image-6.8.0-51-generic") == "6.8.0-51-generic"
    with pytest.raises(StepFailed):
        run_packages([], host_root=root, resource="fleet", phase="post-interrupt")  # not rebooted yet
    hostroot.boot(root)
    done = run_packages([], host_root=root, resource="fleet", phase="post-interrupt")
    assert sh(root, "uname -r") == "6.8.0-51-generic"
    assert done["state"]["packages"]["cve-remediation"]["state"] == "complete"
    assert not apply(root, src, {"kernel": "6.8.0-51-generic"})["changed"]


def test_cve_fails_when_no_fixed_version_is_available(root):
    with pytest.raises(StepFailed) as caught:
        apply(root, os.path.join(SHIPPED, "cve-remediation"), {"openssl": "3.0.14-0ubuntu1"})
    assert "the repositories offer 3.0.13-0ubuntu3.4, older than the fixed 3.0.14-0ubuntu1" in str(caught.value)


def test_cve_uses_dnf_on_rhel_family_hosts(root):
    with open(os.path.join(root, "etc/os-release"), "w") as fh:
        fh.write('ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n')
    result = apply(root, os.path.join(SHIPPED, "cve-remediation"), {"openssl": "3.0.13-0ubuntu3.4", "zlib": "1.3"})
    assert sh(root, "rpm -q --qf '%{VERSION}' openssl") == "3.0.13-0ubuntu3.4"
    assert "dnf upgrade -y -q openssl" in read(root, "/var/lib/nodewright-sim/actions.log")
    assert "zlib: not installed, not affected" in result["results"][0]["steps"][2]["stdout_tail"]


def _tar_gz(files):
    """A gzip tar from {path: bytes or None (a directory)}, paths as dpkg-deb writes them."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                info.size, info.mode = len(data), 0o755
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_deb(path, package, version, files):
    """A Debian binary package (an ar archive of debian-binary, control and data)."""
    control = ("Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: Sentinel <ops@example.com>\n"
               "Description: security agent\n" % (package, version)).encode()
    members = [("debian-binary", b"2.0\n"), ("control.tar.gz", _tar_gz({"./control": control})),
               ("data.tar.gz", _tar_gz(files))]
    out = b"!<arch>\n"
    for name, data in members:
        out += ("%-16s%-12d%-6d%-6d%-8o%-10d`\n" % (name, 0, 0, 0, 0o100644, len(data))).encode() + data
        out += b"\n" if len(data) % 2 else b""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(out)


def test_security_agent_from_a_deb(root):
    write_deb(os.path.join(root, "srv/sentinel-agent_7.1.0_amd64.deb"), "sentinel-agent", "7.1.0",
              {"./opt/": None, "./opt/sentinel/": None, "./opt/sentinel/bin/": None,
               "./opt/sentinel/bin/agent": b"#!/bin/sh\nexec sleep 1000\n"})
    unit = "[Unit]\nDescription=Sentinel\n[Service]\nExecStart=/opt/sentinel/bin/agent\n[Install]\n" \
           "WantedBy=multi-user.target\n"
    src = os.path.join(SHIPPED, "security-agent")
    config = {"artifact": "/srv/sentinel-agent_7.1.0_amd64.deb", "service": "sentinel", "unit": unit}
    apply(root, src, config)
    assert sh(root, "dpkg-query -W -f '${Version}' sentinel-agent") == "7.1.0"
    assert sh(root, "systemctl is-active sentinel") == "active"
    assert read(root, "/etc/systemd/system/sentinel.service") == unit
    assert exists(root, "/opt/sentinel/bin/agent")  # unpacked from the archive: the unit's ExecStart
    run_packages([{"name": "security-agent", "state": "absent"}], host_root=root, resource="fleet")
    assert sh(root, "dpkg-query -W sentinel-agent 2>/dev/null; echo $?") == "1"
    assert not exists(root, "/etc/systemd/system/sentinel.service")
    assert not exists(root, "/opt/sentinel/bin/agent")


def test_security_agent_whose_program_is_missing_fails_its_check(root):
    """A unit whose ExecStart names no program fails to start, as systemd's does (status 203)."""
    write_deb(os.path.join(root, "srv/broken-agent_1.0_amd64.deb"), "broken-agent", "1.0", {"./opt/": None})
    unit = "[Service]\nExecStart=/opt/broken/agentd\n[Install]\nWantedBy=multi-user.target\n"
    with pytest.raises(StepFailed, match="broken.service is failed, not active"):
        apply(root, os.path.join(SHIPPED, "security-agent"),
              {"artifact": "/srv/broken-agent_1.0_amd64.deb", "service": "broken", "unit": unit})
    assert "Failed to locate executable /opt/broken/agentd" in sh(root, "journalctl -u broken")


def test_security_agent_artifact_missing(root):
    with pytest.raises(StepFailed) as caught:
        apply(root, os.path.join(SHIPPED, "security-agent"), {"artifact": "/opt/nowhere/agent"})
    assert "artifact /opt/nowhere/agent does not exist on this host" in str(caught.value)


def test_kdump_new_reservation_needs_a_reboot(root):
    src = os.path.join(SHIPPED, "kdump")
    perform_interrupt(root, apply(root, src, {}))
    changed = apply(root, src, {"crashkernel": "512M"})
    assert changed["interrupt"] == REBOOT
    assert "crashkernel=512M" not in read(root, "/proc/cmdline")
    with pytest.raises(StepFailed):
        run_packages([], host_root=root, resource="fleet", phase="post-interrupt")
    hostroot.boot(root)
    run_packages([], host_root=root, resource="fleet", phase="post-interrupt")
    assert "crashkernel=512M" in read(root, "/proc/cmdline")


# --------------------------------------------------------------------------- shellscript checks
# Skyhook's configMap keys exactly as a Skyhook resource writes them (apply_check.sh,
# config_check.sh, ...): the check that the config supplies is the check that runs.

SHELLSCRIPT = os.path.join(SHIPPED, "shellscript")


def test_shellscript_runs_skyhooks_check_names_and_a_failing_check_fails(root):
    config = {"apply.sh": "echo hi > /etc/hello", "apply_check.sh": "exit 1"}
    with pytest.raises(StepFailed) as caught:
        apply(root, SHELLSCRIPT, config)
    assert "check 'apply-check' of stage apply-check exited 1" in str(caught.value)
    state = caught.value.state["packages"]["shellscript"]
    assert (state["stage"], state["state"]) == ("apply", "erroring"), "never recorded complete"
    assert state["checks"]["apply-check"]["result"] == "failed"
    assert state["checks"]["apply-check"]["exitCode"] == 1
    log = read(root, caught.value.log[len(root):])
    assert "running apply_check.sh for stage apply-check" in log
    assert "nothing to do" not in log


def test_shellscript_skyhook_names_through_the_whole_lifecycle(root, tmp_path):
    config = {
        "apply.sh": "mkdir -p /etc/hello && echo hi > /etc/hello/msg",
        "apply_check.sh": "grep -q hi /etc/hello/msg",
        "config.sh": 'cp "$NODEWRIGHT_CONFIG_DIR/greeting" /etc/hello/greeting',
        "config_check.sh": 'cmp "$SKYHOOK_DIR/configmaps/greeting" /etc/hello/greeting',
        "upgrade.sh": "touch /etc/hello/upgraded",
        "upgrade_check.sh": "test -f /etc/hello/upgraded",
        "uninstall.sh": "rm -rf /etc/hello",
        "uninstall_check.sh": "test ! -e /etc/hello",
        "greeting": "hello",
    }
    applied = apply(root, SHELLSCRIPT, config)
    checks = applied["results"][0]["checks"]
    assert {k: (v["result"], v["exitCode"]) for k, v in checks.items()} == {
        "apply-check": ("passed", 0), "config-check": ("passed", 0)}
    assert applied["state"]["packages"]["shellscript"]["checks"]["config-check"]["result"] == "passed"
    newer = version_of("shellscript", tmp_path, "1.1.0")
    upgraded = apply(root, newer, config)
    assert upgraded["results"][0]["checks"]["upgrade-check"]["result"] == "passed"
    assert exists(root, "/etc/hello/upgraded")
    removed = run_packages([{"src": newer, "state": "absent",
                             "config": config}], host_root=root, resource="fleet")
    assert removed["results"][0]["checks"]["uninstall-check"]["result"] == "passed"
    assert not exists(root, "/etc/hello")


@pytest.mark.parametrize("check_key", ["apply_check.sh", "apply-check.sh"])
def test_shellscript_accepts_both_names_of_a_check(root, check_key):
    result = apply(root, SHELLSCRIPT, {"apply.sh": "echo hi > /etc/hi", check_key: "grep -q hi /etc/hi"})
    assert result["results"][0]["checks"]["apply-check"]["result"] == "passed"


def test_a_script_without_its_check_is_refused_before_the_node_is_touched(root):
    from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
    with pytest.raises(ValidationError) as caught:
        apply(root, SHELLSCRIPT, {"config.sh": "echo on > /etc/on"})
    err = caught.value
    assert err.field == "packages[0].config.config_check.sh"
    assert "supplies config.sh for stage config but no script for its check config-check" in str(err)
    assert "add config_check.sh" in err.hint and "config-check.sh is accepted too" in err.hint
    assert not exists(root, "/var/lib/nodewright"), "nothing on the host changed"
    assert not exists(root, "/etc/on")


def test_two_names_for_one_check_are_refused(root):
    from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
    with pytest.raises(ValidationError) as caught:
        apply(root, SHELLSCRIPT, {"apply.sh": "true", "apply_check.sh": "true", "apply-check.sh": "true"})
    assert "supplies apply_check.sh and apply-check.sh for stage apply-check" in str(caught.value)
    assert not exists(root, "/var/lib/nodewright")


def test_a_stage_without_a_script_says_so_instead_of_passing(root):
    result = apply(root, SHELLSCRIPT, {"config.sh": "echo on > /etc/on", "config_check.sh": "grep -q on /etc/on"})
    steps = {(s["stage"], s["skipped"]): s for s in result["results"][0]["steps"]}
    skipped = steps[("apply-check", True)]
    assert "the config supplies no script for stage apply-check (apply_check.sh or apply-check.sh)" \
        in skipped["reason"]
    checks = result["state"]["packages"]["shellscript"]["checks"]
    assert checks["apply-check"]["result"] == "skipped" and "no script" in checks["apply-check"]["reason"]
    assert checks["config-check"]["result"] == "passed"
