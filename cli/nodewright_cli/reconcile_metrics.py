# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The reconciler's metrics: the Prometheus text it renders after each pass (its
runs, readiness, tainted nodes, each resource's status and drift) and the HTTP
server of ``/metrics`` and ``/healthz``."""

from __future__ import annotations

import logging
import threading

from nodewright_cli import collection  # noqa: F401 pylint: disable=unused-import
from nodewright_cli.reconcile_work import name_of

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.fleet import metrics as nw_metrics
from ansible_collections.nodewright.fleet.plugins.module_utils.node import gating

LOG = logging.getLogger("nodewright.reconcile")


class MetricsMixin(object):
    """Needs ``opts``, ``permission_ok``, ``run_metrics`` and ``drift_counts`` of the
    Reconciler; sets ``metrics_text``."""

    def _update_metrics(self, view, nodes):
        found = nw_metrics.MetricSet()
        found.update(self.run_metrics)
        found.set("nodewright_reconciler_ready", self.permission_ok)
        found.set("nodewright_runtime_required_tainted_nodes",
                  sum(1 for n in nodes if gating.has_taint(n, self.opts.taint_key)))
        for resource, _reason in view["blocked"]:
            found.set("nodewright_resource_status", 1, resource=name_of(resource), status="blocked")
        for resource, described in view["rollouts"]:
            overall = "paused" if described.paused else "disabled" if described.disabled else \
                ((resource.get("status") or {}).get("status") or "unknown")
            try:
                nw_metrics.resource_metrics(found, described, nodes, resource, overall)
            except NodeWrightError as exc:
                LOG.debug("metrics of %s: %s", described.name, exc)
            found.set("nodewright_drift_nodes", self.drift_counts.get(described.name, 0),
                      resource=described.name)
        self.metrics_text = found.render()

    def serve_metrics(self):
        """Serve /metrics (and /healthz) on the metrics port, in a daemon thread."""
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - the http.server API
                if self.path.split("?")[0] == "/metrics":
                    body, ctype = owner.metrics_text.encode(), "text/plain; version=0.0.4; charset=utf-8"
                elif self.path.split("?")[0] in ("/healthz", "/readyz"):
                    body, ctype = b"ok\n", "text/plain"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer((self.opts.metrics_address, self.opts.metrics_port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, name="nodewright-metrics", daemon=True).start()
        LOG.info("metrics on http://%s:%d/metrics", self.opts.metrics_address, server.server_address[1])
        return server
