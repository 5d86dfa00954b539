"""Certificates and keys for the simulator's control plane (a throwaway CA)."""

from __future__ import annotations

import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _write(path, data, mode=0o600):
    with open(path, "wb") as fh:
        fh.write(data)
    os.chmod(path, mode)


def _pem_key(key):
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert(subject, issuer, pubkey, signer, ca=False, server_names=(), client=False, days=3650):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(pubkey).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
               # Key identifiers as kubeadm and managed clusters write them: Python 3.13 verifies
               # certificates strictly (VERIFY_X509_STRICT) and refuses a chain without them.
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(pubkey), critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()),
                              critical=False))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False),
                                        critical=True)
    else:
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [ExtendedKeyUsageOID.SERVER_AUTH]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server_names:
        alts = []
        for n in server_names:
            try:
                alts.append(x509.IPAddress(ipaddress.ip_address(n)))
            except ValueError:
                alts.append(x509.DNSName(n))
        builder = builder.add_extension(x509.SubjectAlternativeName(alts), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _name(cn, org=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def make_pki(d, service_ip="10.0.0.1"):
    """Write ca, apiserver serving cert, client certs and the service-account key pair."""
    os.makedirs(d, exist_ok=True)
    ca_key = _key()
    ca_name = _name("nodewright-sim-ca")
    ca = _cert(ca_name, ca_name, ca_key.public_key(), ca_key, ca=True)
    _write(os.path.join(d, "ca.key"), _pem_key(ca_key))
    _write(os.path.join(d, "ca.crt"), ca.public_bytes(serialization.Encoding.PEM), 0o644)
    key = _key()
    crt = _cert(_name("kube-apiserver"), ca_name, key.public_key(), ca_key,
                server_names=("127.0.0.1", "localhost", service_ip, "kubernetes", "kubernetes.default",
                              "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"))
    _write(os.path.join(d, "apiserver.key"), _pem_key(key))
    _write(os.path.join(d, "apiserver.crt"), crt.public_bytes(serialization.Encoding.PEM), 0o644)
    clients = {
        "admin": ("nodewright-sim-admin", "system:masters"),
        "controller-manager": ("system:kube-controller-manager", None),
        "scheduler": ("system:kube-scheduler", None),
        "kwok": ("nodewright-sim-kwok", "system:masters"),
        # What the API server presents to real kubelets (exec, logs).
        "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", None),
    }
    for name, (cn, org) in clients.items():
        key = _key()
        crt = _cert(_name(cn, org), ca_name, key.public_key(), ca_key, client=True)
        _write(os.path.join(d, name + ".key"), _pem_key(key))
        _write(os.path.join(d, name + ".crt"), crt.public_bytes(serialization.Encoding.PEM), 0o644)
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write(os.path.join(d, "sa.key"), sa.private_bytes(serialization.Encoding.PEM,
                                                       serialization.PrivateFormat.TraditionalOpenSSL,
                                                       serialization.NoEncryption()))
    _write(os.path.join(d, "sa.pub"), sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)


def issue(d, name, cn, org=None, server_names=(), client=True):
    """A certificate signed by the CA in ``d`` (``make_pki``), written as name.crt/.key:
    a client certificate, or a serving one when ``server_names`` are given."""
    with open(os.path.join(d, "ca.key"), "rb") as fh:
        ca_key = serialization.load_pem_private_key(fh.read(), password=None)
    with open(os.path.join(d, "ca.crt"), "rb") as fh:
        ca = x509.load_pem_x509_certificate(fh.read())
    key = _key()
    crt = _cert(_name(cn, org), ca.subject, key.public_key(), ca_key, server_names=server_names,
                client=client and not server_names)
    _write(name + ".key", _pem_key(key))
    _write(name + ".crt", crt.public_bytes(serialization.Encoding.PEM), 0o644)
    return name + ".crt", name + ".key"
