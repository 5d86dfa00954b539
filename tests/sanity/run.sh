#!/usr/bin/env bash
# ansible-test sanity on the collection as `ansible-galaxy collection build` packs it.
#
#   tests/sanity/run.sh                  # every sanity test, with the ansible-core of .venv
#   tests/sanity/run.sh --test pylint    # extra arguments go to `ansible-test sanity`
#   NODEWRIGHT_SANITY_CORE=2.17.14 tests/sanity/run.sh   # another ansible-core, in its own venv
#
# The tarball is unpacked into a temporary ansible_collections/nodewright/fleet tree (the
# layout ansible-test needs), so what is checked is exactly what ships. ansible-test puts pip
# into the virtual environments of its tests with a script from its own file host, which is
# not a package registry: tests/sanity/get_pip_offline.py stands in for it (it takes pip from
# Python's ensurepip and the package index). `make sanity` runs this script.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
venv=${NODEWRIGHT_VENV:-$here/.venv}
python=$venv/bin/python

work=$(mktemp -d "${TMPDIR:-/tmp}/nodewright-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -n "${NODEWRIGHT_SANITY_CORE:-}" ]; then
  # Another ansible-core: a venv of its own, kept between runs.
  venv=$HOME/.cache/nodewright/sanity-venv-$NODEWRIGHT_SANITY_CORE
  if [ ! -x "$venv/bin/ansible-test" ]; then
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q "ansible-core==$NODEWRIGHT_SANITY_CORE"
  fi
  python=$venv/bin/python
fi

# The pip version ansible-test bootstraps, and where it looks for the cached get-pip script.
pip_version=$("$python" - <<'PY'
import inspect, re
from ansible_test._internal import python_requirements
print(re.search(r"pip='([0-9.]+)'", inspect.getsource(python_requirements.get_venv_packages)).group(1))
PY
)
cache="$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py"
if [ ! -s "$cache" ]; then
  mkdir -p "$(dirname "$cache")"
  cp "$here/tests/sanity/get_pip_offline.py" "$cache"
fi

"$venv/bin/ansible-galaxy" collection build "$here" --output-path "$work" >/dev/null
coll="$work/ansible_collections/nodewright/fleet"
mkdir -p "$coll"
tar -xzf "$work"/nodewright-fleet-*.tar.gz -C "$coll"

cd "$coll"
py=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$venv/bin/ansible-test" --version
exec "$venv/bin/ansible-test" sanity --local --python "$py" --color no "$@"
