# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The simulator's certificates pass the strict X.509 verification that Python 3.13 turns
on by default (ssl.VERIFY_X509_STRICT), as the certificates of real clusters do."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest
from nodewright_sim import pki

pytestmark = pytest.mark.unit


def _handshake(tmp_path, cert, key, server_hostname, client_cert=None):
    """Complete a TLS handshake over a socket pair: the server presents ``cert``, the client
    verifies it against the simulator's CA with strict verification. Returns the server's error."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(str(tmp_path / cert), str(tmp_path / key))
    if client_cert:
        server_ctx.verify_mode = ssl.CERT_REQUIRED
        server_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
        server_ctx.load_verify_locations(str(tmp_path / "ca.crt"))
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    client_ctx.verify_flags |= ssl.VERIFY_X509_STRICT
    if client_cert:
        client_ctx.load_cert_chain(str(tmp_path / (client_cert + ".crt")), str(tmp_path / (client_cert + ".key")))
    left, right = socket.socketpair()
    errors = []

    def serve():
        try:
            with server_ctx.wrap_socket(right, server_side=True) as tls:
                tls.recv(1)
        except (ssl.SSLError, OSError) as exc:
            errors.append(exc)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(left, server_hostname=server_hostname) as tls:
            tls.sendall(b"x")
    finally:
        thread.join(10)
    return errors


def test_the_api_server_certificate_verifies_strictly(tmp_path):
    pki.make_pki(str(tmp_path))
    assert _handshake(tmp_path, "apiserver.crt", "apiserver.key", "localhost") == []


def test_client_certificates_verify_strictly(tmp_path):
    pki.make_pki(str(tmp_path))
    assert _handshake(tmp_path, "apiserver.crt", "apiserver.key", "127.0.0.1", client_cert="admin") == []


def test_issued_serving_certificates_verify_strictly(tmp_path):
    pki.make_pki(str(tmp_path))
    pki.issue(str(tmp_path), str(tmp_path / "registry"), "registry", server_names=("localhost",))
    assert _handshake(tmp_path, "registry.crt", "registry.key", "localhost") == []
