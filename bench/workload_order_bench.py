#!/usr/bin/env python3
# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Slot time spent waiting on protected pods: ``nodeOrder: creation`` vs ``workload``.

The rollout engine itself (``waves.next_wave`` / ``record_wave_result``, the code every
front-end runs) on a seeded fleet in which some nodes run a training job with a known
end, some one whose end nobody states, and the rest nothing. A node admitted while its
job runs holds its slot until the job ends, then takes ``work`` seconds; a wave lasts as
long as its slowest node. Reported per order: the makespan, the slot time spent
waiting on protected pods (the sum over nodes of the time between admission and the
job's end) and the mean wave length. The engine is timed, not the cluster: the cost of
a node on the simulator is in ``rollout_bench.py`` and ``scale_bench.py``.

    .venv/bin/python bench/workload_order_bench.py                 # 60 and 300 nodes, 20 seeds
    .venv/bin/python bench/workload_order_bench.py --nodes 1000 --seeds 5
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import statistics
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, ".collections"))

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import workloads  # noqa: E402
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.policy import parse_policy  # noqa: E402
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.waves import (  # noqa: E402
    WAVE,
    RolloutState,
    next_wave,
    record_wave_result,
)

T0 = datetime.datetime(2026, 12, 4, tzinfo=datetime.timezone.utc)
RESULTS = os.path.join(REPO, "bench", "results", "workload-order.md")


def fleet(count, seed, busy=0.4, unknown=0.1, work=(300, 900), jobs=(600, 6 * 3600)):
    """``[(name, created, job_end_seconds or None (free) or "unknown" with its real end)]``."""
    rnd = random.Random(seed)
    out = []
    for i in range(count):
        roll = rnd.random()
        end = rnd.uniform(*jobs) if roll < busy + unknown else None
        out.append({"name": "n%05d" % i, "created": "2025-01-01T00:00:00Z", "end": end,
                    "stated": end is not None and roll < busy, "work": rnd.uniform(*work)})
    return out


def simulate(nodes, order, batch):
    policy = parse_policy({"default": {"budget": {"count": batch}}, "nodeOrder": order})
    state = RolloutState(policy)
    view = [{"name": n["name"], "labels": {}, "creationTimestamp": n["created"]} for n in nodes]
    by_name = {n["name"]: n for n in nodes}
    clock, waited, idle, waves = 0.0, 0.0, 0.0, []
    while True:
        keys = None
        if order == "workload":
            # What the cluster says at this moment: jobs still running, with their stated end or none.
            keys = {}
            for n in nodes:
                if n["end"] is not None and n["end"] > clock and n["name"] not in state.succeeded:
                    keys[n["name"]] = (1, T0 + datetime.timedelta(seconds=n["end"])) if n["stated"] \
                        else workloads.Occupancy([], None, True).sort_key()
        decision = next_wave(state, view, ignore_windows=True, order_keys=keys)
        if decision.status != WAVE:
            return clock, waited, idle, waves
        length = 0.0
        for name in decision.wave.nodes:
            node = by_name[name]
            wait = max(0.0, (node["end"] or 0.0) - clock)
            waited += wait
            length = max(length, wait + node["work"])
        clock += length
        waves.append(length)
        # Every slot of the wave is held for its whole length; what is not the node's own work is lost.
        idle += sum(length - by_name[name]["work"] for name in decision.wave.nodes)
        record_wave_result(state, succeeded=decision.wave.nodes)


def run(sizes, seeds, batch):
    rows = []
    for count in sizes:
        per = {}
        for order in ("creation", "workload"):
            spans, waits, idles, bounds = [], [], [], []
            for seed in range(seeds):
                nodes = fleet(count, seed)
                span, waited, idle, _waves = simulate(nodes, order, batch)
                spans.append(span)
                waits.append(waited)
                idles.append(idle)
                # No order beats the longest job plus its node's work, nor the work spread over the slots.
                bounds.append(max(max((n["end"] or 0) + n["work"] for n in nodes),
                                  sum(n["work"] for n in nodes) / batch))
            per[order] = (statistics.median(spans), statistics.median(waits), statistics.median(idles),
                          statistics.median(bounds))
        rows.append((count, per))
    return rows


def table(rows, seeds, batch):
    lines = ["| nodes | order | makespan (h) | lower bound (h) | slot time waiting on protected pods (h) "
             "| slot time lost (h) |",
             "|---:|---|---:|---:|---:|---:|"]
    for count, per in rows:
        for order in ("creation", "workload"):
            span, waited, idle, bound = per[order]
            lines.append("| %d | %s | %.2f | %.2f | %.1f | %.1f |" % (count, order, span / 3600, bound / 3600,
                                                                     waited / 3600, idle / 3600))
        c, w = per["creation"], per["workload"]
        lines.append("| %d | workload / creation | %.2fx | | %.2fx | %.2fx |" % (count, w[0] / c[0], w[1] / c[1],
                                                                              w[2] / c[2]))
    head = ("# Node order: slot time spent waiting on protected pods\n\n"
            "`bench/workload_order_bench.py`: the rollout engine on a seeded fleet, batches of %d, median of %d "
            "seeds. 40%% of the nodes run a job that ends 10 min to 6 h after the start with its end stated "
            "(`nodewright.io/expected-end`), 10%% one whose end nobody states, the rest nothing; each node's own "
            "work takes 5-15 min once its job ended. *Slot time lost*: every slot of a wave is held for the "
            "wave's whole length; what is not the node's own work (waiting on its pods, or on the wave's slowest "
            "node) is lost.\n\n" % (batch, seeds))
    return head + "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[60, 300])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--no-write", action="store_true", help="print the table only")
    args = parser.parse_args()
    text = table(run(args.nodes, args.seeds, args.batch), args.seeds, args.batch)
    print(text)
    if not args.no_write:
        # The hand-written reading (from its first "## " heading on) is kept.
        kept = ""
        if os.path.exists(RESULTS):
            with open(RESULTS) as fh:
                old = fh.read()
            if "\n## " in old:
                kept = "\n" + old[old.index("\n## ") + 1:]
        with open(RESULTS, "w") as fh:
            fh.write(text + kept)


if __name__ == "__main__":
    main()
