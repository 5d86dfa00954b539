#!/usr/bin/env bash
# Copies the CRDs of deploy/crds (their one source) into the chart's crds/ directory, and
# the Grafana dashboard of deploy/grafana into the chart's dashboards/ (the chart can only
# read files inside itself). Run it after changing either; tests/integration/test_helm_chart.py
# and tests/unit/repo/test_dashboard.py fail while the copies differ.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rm -f "$here/nodewright/crds/"*.yaml
cp "$here/../crds/"*.yaml "$here/nodewright/crds/"
cp "$here/../grafana/nodewright-dashboard.json" "$here/nodewright/dashboards/nodewright.json"
