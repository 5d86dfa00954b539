"""The run report's HTML page, looked at in a real headless browser (Debian's chromium): a
rollout on simulator nodes where one node fails in the second wave and the policy halts; the
page the callback wrote shows the waves, each node's steps coloured by outcome, the policy's
decisions, the failure with its reason and the nodes never admitted. Checked through the DOM
chromium parsed and through the pixels of its screenshot. No network: the page loads nothing."""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

import pytest

from test_rollout_playbook import Fleet

pytestmark = pytest.mark.integration

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODEWRIGHT = os.path.join(os.path.dirname(sys.executable), "nodewright")
FAILED_RGB = (0xD6, 0x27, 0x28)
OK_RGB = (0x3A, 0x9D, 0x5D)
CHANGED_RGB = (0xD9, 0xA4, 0x00)


@pytest.fixture(scope="module")
def chromium():
    """Debian's chromium; installed through .ci/system-packages when this runs as root with apt."""
    found = shutil.which("chromium")
    if not found and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run([os.path.join(REPO, ".ci", "system-packages")], check=True)
        found = shutil.which("chromium")
    if not found:
        pytest.fail("chromium is needed to look at the report page: install Debian's chromium "
                    "(.ci/system-packages lists it)")
    return found


def browser(chromium, tmp_path, *args):
    """Run headless chromium with a profile of its own and no network."""
    cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--user-data-dir=%s" % (tmp_path / "chromium-profile"), "--proxy-server=127.0.0.1:9",
           "--proxy-bypass-list=<-loopback>"] + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def png_pixels(path):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA PNG, as chromium writes them."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    width = height = channels = None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    raw = zlib.decompress(b"".join(chunks))
    stride = width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = prev[i]
            c = prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def count(rows, rgb):
    return sum(1 for row in rows for px in row if px == rgb)


def test_the_report_page_shows_waves_steps_decisions_and_failures(sim, tmp_path, chromium):
    fleet = Fleet(sim, tmp_path, [("h100", 3), ("b200", 2)])
    policy, res = "page-" + fleet.label, "page-" + fleet.label
    fleet.create("DeploymentPolicy", policy, {"default": {"budget": {"percent": 100}, "strategy": {
        "linear": {"initialBatch": 1, "delta": 1, "failureThreshold": 1, "safetyLimit": 100}}}})
    fleet.create("NodeWright", res, {
        "nodeSelectors": {"matchLabels": {"rollout-test": fleet.label}}, "deploymentPolicy": policy,
        "podNonInterruptLabels": {"matchLabels": {"app.kubernetes.io/component": "training"}},
        "packages": {"shellscript": {"version": "1.0.0", "interrupt": {"type": "service", "services": ["containerd"]},
                                     "configMap": {"apply.sh": "[ ! -e /etc/report-fail ] || "
                                                               "{ echo 'disk full on purpose' >&2; exit 3; }\n",
                                                   "apply_check.sh": "test ! -e /etc/report-fail\n"}}}})
    waves = [sorted(w["nodes"]) for w in fleet.plan(res)["waves"]["waves"]]
    assert [len(w) for w in waves] == [1, 2, 2]
    bad = waves[1][0]
    with open(os.path.join(sim.host_root(bad), "etc", "report-fail"), "w") as fh:
        fh.write("fail here\n")

    proc = fleet.playbook("rollout.yml", "-e", "nodewright_resource=%s" % res)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "NodeWright rollout halted" in proc.stdout
    page = tmp_path / "report.html"
    assert page.is_file(), "the callback writes the page beside report.json"

    # nodewright report renders the same page from the JSON file.
    again = subprocess.run([NODEWRIGHT, "report", str(tmp_path / "report.json"), "-o", str(tmp_path / "cli.html")],
                           capture_output=True, text=True, env=sim.env(), check=False)
    assert again.returncode == 0, again.stderr
    assert "%s failed at" % bad in again.stdout and "rollout halted" in again.stdout
    assert (tmp_path / "cli.html").read_text() == page.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.read_text()), "the page must load nothing"

    dom = browser(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    for number in (1, 2):
        assert 'class="group wave" data-wave="%d"' % number in html
    assert 'data-wave="3"' not in html
    admitted = waves[0] + waves[1]
    for node in admitted:
        outcome = "failed" if node == bad else "ok"
        assert 'data-node="%s" data-outcome="%s"' % (node, outcome) in html
    good = waves[0][0]
    good_row = html[html.index('data-node="%s" data-outcome="ok"' % good):]
    good_row = good_row[:good_row.index("</g>")]
    for kind in ("cordon", "wait for pods", "drain", "packages", "restart", "health", "uncordon"):
        assert 'data-kind="%s"' % kind in good_row, kind
    bad_row = html[html.index('data-node="%s" data-outcome="failed"' % bad):]
    bad_row = bad_row[:bad_row.index("</g>")]
    assert 'data-kind="packages" data-outcome="failed"' in bad_row
    assert 'data-kind="uncordon"' not in bad_row, "a failed node stays cordoned"
    assert re.search(r'<g class="decision" data-status="halted">', html)
    failures = html[html.index('id="failures"'):]
    assert 'id="node-%s"' % bad in failures and "disk full on purpose" in failures
    untouched = html[html.index('id="untouched"'):]
    for node in waves[2]:
        assert 'data-node="%s"' % node in untouched
    assert re.search(r'<span class="status halted">halted</span>', html)

    shot = tmp_path / "report.png"
    taken = browser(chromium, tmp_path, "--window-size=1300,1000", "--screenshot=%s" % shot, page.as_uri())
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-2000:]
    os.makedirs(os.path.join(REPO, "tests", "output"), exist_ok=True)
    shutil.copy(str(shot), os.path.join(REPO, "tests", "output", "report-page.png"))
    width, height, rows = png_pixels(str(shot))
    assert (width, height) == (1300, 1000)
    # The failed step and the failed badge are red, the steps of the nodes that passed green and yellow.
    assert count(rows, FAILED_RGB) > 200
    assert count(rows, OK_RGB) > 200 and count(rows, CHANGED_RGB) > 200
