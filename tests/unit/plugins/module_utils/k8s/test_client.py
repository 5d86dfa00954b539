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


def _self_signed(tmp_path):
    import datetime
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodewright-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "client.crt", tmp_path / "client.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


def test_a_detached_client_reads_the_credential_files_once_and_has_a_pool_of_its_own(tmp_path):
    import ssl

    from kubernetes import client

    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import detached_api_client
    cert, key = _self_signed(tmp_path)
    cfg = client.Configuration()
    cfg.host = "https://127.0.0.1:6443"
    cfg.ssl_ca_cert, cfg.cert_file, cfg.key_file = cert, cert, key
    api = client.ApiClient(cfg)
    detached = detached_api_client(api)
    for path in (cert, key):
        os.remove(path)  # what the process that wrote them does when it exits
    pool = detached.rest_client.pool_manager
    assert pool is not api.rest_client.pool_manager
    kw = pool.connection_pool_kw
    assert not any(kw.get(k) for k in ("ca_certs", "cert_file", "key_file")), kw
    ctx = kw["ssl_context"]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and kw["cert_reqs"] == ssl.CERT_REQUIRED
    assert ctx.get_ca_certs()[0]["subject"] == ((("commonName", "nodewright-test"),),)
    # The same request settings as the usual client.
    assert detached.configuration.host == cfg.host and detached.configuration.retries == cfg.retries


def test_a_detached_client_keeps_an_unverified_or_plain_http_setting():
    import ssl

    from kubernetes import client

    from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import detached_api_client
    cfg = client.Configuration()
    cfg.host, cfg.verify_ssl = "https://127.0.0.1:6443", False
    kw = detached_api_client(client.ApiClient(cfg)).rest_client.pool_manager.connection_pool_kw
    assert kw["cert_reqs"] == ssl.CERT_NONE and kw["ssl_context"].verify_mode == ssl.CERT_NONE
    assert not kw["ssl_context"].check_hostname
    cfg = client.Configuration()
    cfg.host = "http://127.0.0.1:8080"
    assert "ssl_context" not in detached_api_client(client.ApiClient(cfg)).rest_client.pool_manager.connection_pool_kw
