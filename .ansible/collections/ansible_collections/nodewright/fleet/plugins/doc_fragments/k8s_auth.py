# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Connection options shared by every NodeWright module and the inventory plugin."""

from __future__ import annotations


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file.
      - If not set, C(K8S_AUTH_KUBECONFIG), then C(KUBECONFIG), then C(~/.kube/config) are used, and
        finally the in-cluster service account.
    type: path
  context:
    description:
      - The kubeconfig context to use. Defaults to the current context. Env C(K8S_AUTH_CONTEXT).
    type: str
  host:
    description:
      - URL of the Kubernetes API server. Env C(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - Bearer token. Env C(K8S_AUTH_API_KEY) (set by the AWX/AAP Kubernetes credential).
    type: str
  ca_cert:
    description:
      - CA certificate that signed the API server's certificate. Env C(K8S_AUTH_SSL_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Client certificate. Env C(K8S_AUTH_CERT_FILE).
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Client key. Env C(K8S_AUTH_KEY_FILE).
    type: path
    aliases: [key_file]
  validate_certs:
    description:
      - Whether to verify the API server's certificate. Env C(K8S_AUTH_VERIFY_SSL).
    type: bool
    aliases: [verify_ssl]
  proxy:
    description:
      - HTTP proxy for API requests. Env C(K8S_AUTH_PROXY).
    type: str
requirements:
  - kubernetes >= 30.1.0 (Python library)
notes:
  - Explicit options win over the C(K8S_AUTH_*) environment variables.
"""
