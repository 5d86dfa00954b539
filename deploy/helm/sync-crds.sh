#!/usr/bin/env bash
# Copies the CRDs of deploy/crds (their one source) into the chart's crds/ directory.
# Run it after changing a CRD; tests/integration/test_helm_chart.py fails while the
# two copies differ.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rm -f "$here/nodewright/crds/"*.yaml
cp "$here/../crds/"*.yaml "$here/nodewright/crds/"
