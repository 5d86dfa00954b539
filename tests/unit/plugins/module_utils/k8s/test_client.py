"""The Kubernetes client factory: what the controller loads before Ansible forks workers."""

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))
COLLECTIONS = os.path.join(REPO, ".collections")


def _modules_after(statement):
    code = ("import sys\n%s\nprint(' '.join(sorted(m for m in sys.modules if m.startswith('kubernetes.client.api.'))))"
            % statement)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=COLLECTIONS))
    return set(out.stdout.split())


def test_loading_the_k8s_action_plugin_loads_the_typed_apis():
    # The strategy loads the action class in the controller; the workers it forks
    # then inherit the API classes instead of building them again per task.
    loaded = _modules_after("import ansible_collections.nodewright.fleet.plugins.plugin_utils.k8s_action")
    assert {"kubernetes.client.api.core_v1_api", "kubernetes.client.api.custom_objects_api",
            "kubernetes.client.api.batch_v1_api"} <= loaded


def test_the_client_module_alone_stays_lazy():
    # A module run on a remote host imports k8s_client without paying for classes it may not use.
    loaded = _modules_after("import ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client")
    assert "kubernetes.client.api.core_v1_api" not in loaded


def test_warm_imports_says_whether_the_library_is_there(monkeypatch):
    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import client as k8s_client
    assert k8s_client.warm_imports() is True
    monkeypatch.setattr(k8s_client, "HAS_KUBERNETES", False)
    assert k8s_client.warm_imports() is False
