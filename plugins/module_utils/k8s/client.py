# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The one Kubernetes client factory of NodeWright, shared by the inventory plugin,
the modules and the rollout engine.

Credentials come, in this order, from explicit options, the ``K8S_AUTH_*``
environment variables (what AWX/AAP's Kubernetes credential sets), a kubeconfig
file (``kubeconfig`` option, ``K8S_AUTH_KUBECONFIG``, ``KUBECONFIG``, then
``~/.kube/config``), and finally the in-cluster service account.
"""

from __future__ import annotations

import json
import os
import re

try:
    from urllib.parse import quote
except ImportError:  # pragma: no cover - Python 2 is not supported, but module_utils may be imported there
    from urllib import quote

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError, NodeWrightError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names

try:
    import urllib3
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.client.rest import ApiException
    from kubernetes.config.config_exception import ConfigException
    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError as exc:  # reported by the caller with a clear message
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = exc
    ApiException = ConfigException = Exception

AUTH_OPTIONS = ("kubeconfig", "context", "host", "api_key", "ca_cert", "client_cert", "client_key",
                "validate_certs", "proxy")
ENV = {
    "kubeconfig": "K8S_AUTH_KUBECONFIG", "context": "K8S_AUTH_CONTEXT", "host": "K8S_AUTH_HOST",
    "api_key": "K8S_AUTH_API_KEY", "ca_cert": "K8S_AUTH_SSL_CA_CERT", "client_cert": "K8S_AUTH_CERT_FILE",
    "client_key": "K8S_AUTH_KEY_FILE", "validate_certs": "K8S_AUTH_VERIFY_SSL", "proxy": "K8S_AUTH_PROXY",
}
IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"

# Argument spec fragment for modules (the doc fragment nodewright.fleet.k8s_auth documents it).
AUTH_ARG_SPEC = {
    "kubeconfig": {"type": "path"},
    "context": {"type": "str"},
    "host": {"type": "str"},
    "api_key": {"type": "str", "no_log": True},
    "ca_cert": {"type": "path", "aliases": ["ssl_ca_cert"]},
    "client_cert": {"type": "path", "aliases": ["cert_file"]},
    "client_key": {"type": "path", "aliases": ["key_file"], "no_log": False},
    "validate_certs": {"type": "bool", "aliases": ["verify_ssl"]},
    "proxy": {"type": "str"},
}

_TRUE = ("1", "true", "yes", "on")
_TRANSPORT_ERRORS = (OSError, urllib3.exceptions.HTTPError) if HAS_KUBERNETES else (OSError,)


def require_kubernetes():
    if not HAS_KUBERNETES:
        raise NodeWrightError("the Python 'kubernetes' library is needed on the host that runs this task "
                              "(%s)" % KUBERNETES_IMPORT_ERROR,
                              hint="pip install kubernetes, or run the task with delegate_to: localhost")


def resolve_auth(params=None, environ=None):
    """Merge explicit options with the K8S_AUTH_* environment; explicit wins."""
    params = params or {}
    environ = os.environ if environ is None else environ
    auth = {}
    for key in AUTH_OPTIONS:
        value = params.get(key)
        if value is None and environ.get(ENV[key]) not in (None, ""):
            value = environ[ENV[key]]
            if key == "validate_certs":
                value = str(value).lower() in _TRUE
        if value is not None:
            auth[key] = value
    return auth


def _describe(auth):
    if auth.get("host"):
        return auth["host"]
    return "the cluster of kubeconfig %s" % (auth.get("kubeconfig") or os.environ.get("KUBECONFIG")
                                             or "~/.kube/config")


def build_configuration(auth):
    """Return a kubernetes.client.Configuration for the given auth options."""
    require_kubernetes()
    cfg = k8s_client.Configuration()
    explicit_host = auth.get("host")
    loaded = False
    if not (explicit_host and (auth.get("api_key") or auth.get("client_cert"))):
        kubeconfig = auth.get("kubeconfig") or os.environ.get("KUBECONFIG")
        default = os.path.expanduser("~/.kube/config")
        candidates = [kubeconfig] if kubeconfig else ([default] if os.path.exists(default) else [])
        for path in candidates:
            for one in str(path).split(os.pathsep):
                if one and not os.path.exists(os.path.expanduser(one)):
                    raise ClusterError("kubeconfig %s does not exist" % one,
                                       hint="set kubeconfig, K8S_AUTH_KUBECONFIG or KUBECONFIG to an existing "
                                            "file, or give host and api_key")
            try:
                k8s_config.load_kube_config(config_file=os.path.expanduser(str(path)),
                                            context=auth.get("context"), client_configuration=cfg,
                                            persist_config=False)
                loaded = True
            except ConfigException as exc:
                raise ClusterError("cannot use kubeconfig %s: %s" % (path, exc),
                                   hint="check the file and the context name")
        if not loaded and not explicit_host:
            if os.path.exists(IN_CLUSTER_TOKEN):
                try:
                    k8s_config.load_incluster_config(client_configuration=cfg)
                    loaded = True
                except ConfigException as exc:
                    raise ClusterError("in-cluster credentials unusable: %s" % exc)
            else:
                raise ClusterError(
                    "no cluster credentials found",
                    hint="set the kubeconfig option, K8S_AUTH_KUBECONFIG or KUBECONFIG, or host with api_key "
                         "(K8S_AUTH_HOST/K8S_AUTH_API_KEY), or run in a pod with a service account")
    if explicit_host:
        cfg.host = explicit_host
    if auth.get("api_key"):
        cfg.api_key = {"authorization": "Bearer " + auth["api_key"]}
    if auth.get("ca_cert"):
        cfg.ssl_ca_cert = auth["ca_cert"]
    if auth.get("client_cert"):
        cfg.cert_file = auth["client_cert"]
    if auth.get("client_key"):
        cfg.key_file = auth["client_key"]
    if auth.get("validate_certs") is not None:
        cfg.verify_ssl = bool(auth["validate_certs"])
    if auth.get("proxy"):
        cfg.proxy = auth["proxy"]
    if not cfg.verify_ssl:
        urllib3.disable_warnings()
    cfg.retries = 2
    cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, 64)  # parallel evictions
    return cfg


_CLIENT_CACHE = {}

# The typed API classes NodeWright's modules use. kubernetes >= 35 loads each API
# class and its pydantic models on first use: CoreV1Api alone builds some 250 model
# classes, about half a second of CPU. Ansible runs every task in a freshly forked
# worker, so a rollout would pay that once per node and task; warm_imports() lets the
# controller pay it once, before the workers fork.
_TYPED_APIS = ("CoreV1Api", "CustomObjectsApi", "BatchV1Api")


def warm_imports():
    """Load the typed API classes into this process (no network, no credentials).

    Call it in a long-lived parent (the Ansible controller) so that forked workers
    inherit the loaded classes. Returns False when the library is missing."""
    if not HAS_KUBERNETES:
        return False
    for name in _TYPED_APIS:
        getattr(k8s_client, name)
    return True


def _forget_inherited_connections():
    """In a forked child, drop the pooled connections inherited from the parent.

    A TLS connection cannot be shared between processes; without this, a worker
    forked from a controller that had already talked to the API server could write
    into the parent's connection. Closing the child's copy of the socket does not
    disturb the parent's."""
    for api in list(_CLIENT_CACHE.values()):
        try:
            api.rest_client.pool_manager.clear()
        except Exception:  # pylint: disable=broad-except  # a stale pool must never fail a task
            _CLIENT_CACHE.clear()
            return


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_inherited_connections)


def get_api_client(params=None, environ=None):
    """A cached ApiClient per distinct auth; reusing it keeps connections pooled."""
    auth = resolve_auth(params, environ)
    key = tuple(sorted((k, str(v)) for k, v in auth.items())) + (os.environ.get("KUBECONFIG", ""),)
    if key not in _CLIENT_CACHE:
        cfg = build_configuration(auth)
        api = k8s_client.ApiClient(cfg)
        api.nodewright_target = _describe(auth) if auth.get("host") else cfg.host
        _CLIENT_CACHE[key] = api
    return _CLIENT_CACHE[key]


def detached_api_client(api):
    """An ApiClient with ``api``'s configuration whose connections need no file later.

    A kubeconfig's embedded CA, client certificate and key reach the client as
    temporary files that the process which loaded the kubeconfig removes when it
    exits; every new TLS connection reads them again. The files are read into an SSL
    context here, and the returned client has a connection pool of its own. For code
    that may run after the files are gone and while ``api``'s pool is in use: a signal
    handler in an Ansible worker deleting what it created after the controller (which
    wrote the files) has exited. A SOCKS proxy keeps the file-based pool."""
    import copy
    import ssl

    cfg = copy.copy(api.configuration)
    detached = k8s_client.ApiClient(cfg)
    if not str(cfg.host).startswith("https"):
        return detached
    if cfg.verify_ssl:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert, cadata=cfg.ca_cert_data)
    else:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    pool_args = {"ssl_context": ctx, "cert_reqs": ssl.CERT_REQUIRED if cfg.verify_ssl else ssl.CERT_NONE,
                 "maxsize": 2}
    if cfg.retries is not None:
        pool_args["retries"] = cfg.retries
    if cfg.assert_hostname is not None:
        pool_args["assert_hostname"] = cfg.assert_hostname
    if cfg.tls_server_name:
        pool_args["server_hostname"] = cfg.tls_server_name
    rest = detached.rest_client
    if isinstance(rest.pool_manager, urllib3.ProxyManager):
        rest.pool_manager = urllib3.ProxyManager(proxy_url=cfg.proxy, proxy_headers=cfg.proxy_headers,
                                                 **pool_args)
    elif type(rest.pool_manager) is urllib3.PoolManager:  # pylint: disable=unidiomatic-typecheck
        rest.pool_manager = urllib3.PoolManager(**pool_args)
    return detached


def explain_api_error(exc, what, target=None):
    """Turn an API or connection failure into a ClusterError a person can act on.

    The HTTP status, when there is one, is in ``error.details["status"]``.
    """
    where = (" at %s" % target) if target else ""
    status = getattr(exc, "status", None)
    if status == 401:
        return ClusterError("%s: the API server%s rejected the credentials (401)" % (what, where),
                            hint="the token or certificate is missing, wrong or expired; refresh the credential",
                            status=status)
    if status == 403:
        reason = _api_message(exc)
        return ClusterError("%s: forbidden (403): %s" % (what, reason),
                            hint="grant the missing permission (see deploy/ for NodeWright's least-privilege "
                                 "ClusterRole)", status=status)
    if status == 404:
        return ClusterError("%s: not found (404): %s" % (what, _api_message(exc)), status=status)
    if status:
        return ClusterError("%s: HTTP %s from the API server%s: %s" % (what, status, where, _api_message(exc)),
                            status=status)
    return ClusterError("%s: cannot reach the Kubernetes API server%s: %s" % (what, where, _short(exc)),
                        hint="check that the cluster is up and the address and port are right")


def _api_message(exc):
    import json
    body = getattr(exc, "body", None)
    if body:
        try:
            return json.loads(body).get("message") or body
        except (ValueError, AttributeError):
            return str(body)[:300]
    return getattr(exc, "reason", None) or str(exc)


def _short(exc):
    text = str(exc)
    if "Connection refused" in text or "NewConnectionError" in text:
        return "connection refused"
    if "timed out" in text.lower():
        return "connection timed out"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "TLS certificate verification failed (set ca_cert, or validate_certs: false for a lab)"
    return text[:300]


def call(what, fn, *args, **kwargs):
    """Run one API call; failures become ClusterError with a clear message."""
    try:
        return fn(*args, **kwargs)
    except ApiException as exc:
        raise explain_api_error(exc, what)
    except _TRANSPORT_ERRORS as exc:
        raise explain_api_error(exc, what)


# --- API paths -------------------------------------------------------------------------
# Every URL path NodeWright builds from a name goes through api_path: each segment is
# checked against its rule (the API server decodes %2F back into '/', so quoting alone
# would not keep "h200-0000/status" out of the status subresource) and then quoted.

_NAME_RULES = {
    "subdomain": names.object_name,
    "label": lambda value, field, kind: names.dns_label(value, field, "%s name" % kind),
    "node": lambda value, field, kind: names.node_name(value, field),
    "nodewright": lambda value, field, kind: names.nodewright_name(value, field),
    "segment": lambda value, field, kind: names.path_segment(value, field, "%s name" % kind),
}
_KINDS = {"nodes": "node", "pods": "pod", "nodewrights": "NodeWright", "deploymentpolicies": "DeploymentPolicy",
          "customresourcedefinitions": "CustomResourceDefinition", "jobs": "Job", "events": "Event"}
_VERSION_RE = re.compile(r"^v[0-9]+((alpha|beta)[0-9]+)?$")
_PLURAL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _segment(value):
    return quote(value, safe="")


def group_path(group_version):
    """``/api/v1`` or ``/apis/GROUP/VERSION`` (the discovery document of a group version), validated."""
    group, slash, version = str(group_version).rpartition("/")
    if not _VERSION_RE.fullmatch(version) or (slash and not names.is_subdomain(group)) or (not slash and version != "v1"):
        raise names.InvalidName("%r is not an API group version" % (group_version,), field="apiVersion",
                                hint="e.g. v1, apps/v1 or nodewright.io/v1alpha1")
    parts = ["api", version] if not slash else ["apis", group, version]
    return "/" + "/".join(_segment(p) for p in parts)


def api_path(group_version, plural, name=None, namespace=None, subresource=None, name_rule="subdomain",
             field="name", namespace_field="namespace", kind=None):
    """``/api/v1/[namespaces/NS/]PLURAL[/NAME[/SUBRESOURCE]]`` (``/apis/GROUP/VERSION/...`` for
    a named group), every segment validated and quoted.

    ``name_rule`` is the naming rule of the kind: ``subdomain`` (most kinds), ``node``,
    ``label`` (DNS-1123 label), ``nodewright`` or ``segment`` (any name that is a single
    path segment). ``field`` and ``namespace_field`` name the option the values came from,
    for the error; ``kind`` names the kind in it (default: the plural)."""
    base = group_path(group_version)
    if not _PLURAL_RE.fullmatch(plural or "") or (subresource is not None and not _PLURAL_RE.fullmatch(subresource)):
        raise names.InvalidName("%r is not a resource name" % ("%s/%s" % (plural, subresource)
                                                               if subresource else plural,),
                                hint="a bug in the caller: resources are fixed lower-case words")
    parts = []
    if namespace is not None:
        parts += ["namespaces", names.namespace(namespace, namespace_field)]
    parts.append(plural)
    if name is not None:
        rule = _NAME_RULES[name_rule]
        parts.append(names.path_segment(rule(name, field, kind or _KINDS.get(plural, plural)), field))
        if subresource:
            parts.append(subresource)
    elif subresource:
        raise names.InvalidName("subresource %s needs a name" % subresource)
    return base + "/" + "/".join(_segment(p) for p in parts)


# --- Raw JSON reads -------------------------------------------------------------------
# The generated API classes deserialise every object into model instances; at
# thousands of nodes or pods that costs more than the transfer itself, and importing
# CoreV1Api alone takes a good part of a second. Reads that only need the data use
# these helpers: one GET through the same ApiClient (auth, TLS, proxy, retries), the
# body decoded with json.loads.

_JSON_HEADERS = {"Accept": "application/json"}


def _raw_get(api, path, query, timeout):
    if hasattr(api, "param_serialize"):  # clients generated with pydantic models (kubernetes >= 35)
        method, url, headers, body, _post = api.param_serialize(
            "GET", path, query_params=list(query), header_params=dict(_JSON_HEADERS),
            auth_settings=["BearerToken"])
        resp = api.call_api(method, url, header_params=headers, _request_timeout=timeout)
        data = resp.read()
        if not 200 <= resp.status <= 299:
            raise ApiException.from_response(http_resp=resp, body=None, data=None)
        return data
    resp = api.call_api(path, "GET", query_params=list(query), header_params=dict(_JSON_HEADERS),
                        auth_settings=["BearerToken"], _preload_content=False, _return_http_data_only=True,
                        _request_timeout=timeout)
    try:
        return resp.data
    finally:
        resp.release_conn()


def _decode(data, what):
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ClusterError("%s: the API server sent a response that is not JSON (%s)" % (what, exc))


def get_json(api, path, what, query=(), timeout=None):
    """GET ``path`` (e.g. ``/api/v1/nodes``) and return the decoded JSON; ClusterError on failure."""
    return _decode(call(what, _raw_get, api, path, query, timeout), what)


# The API server writes a list's metadata (and so its continue token) before its items.
_CONTINUE_RE = re.compile(rb'^\{[^\[]{0,2048}?"continue":"([^"\\]*)"')


def _expired(exc, what):
    if exc.details.get("status") == 410:
        return ClusterError("%s: the listing took longer than the API server keeps its continue token "
                            "(410 Gone)" % what,
                            hint="run it again; a larger page size makes fewer, longer requests", status=410)
    return exc


def list_pages(api, path, what, query=(), page_size=500, timeout=None):
    """Yield the ``items`` of each page of a paginated LIST (``limit`` and ``continue``).

    While the caller works on one page the next one is already being fetched (its
    continue token is read from the head of the raw page), so the API server's time
    and the caller's overlap.
    """
    base = list(query) + [("limit", page_size)]
    pool = None

    def fetch(token):
        return call(what, _raw_get, api, path, base + ([("continue", token)] if token else []), timeout)

    try:
        raw = fetch(None)
        while True:
            match = _CONTINUE_RE.match(raw)
            pending = None
            if match and match.group(1):
                if pool is None:
                    from concurrent.futures import ThreadPoolExecutor
                    pool = ThreadPoolExecutor(max_workers=1)
                pending = pool.submit(fetch, match.group(1).decode("ascii"))
            page = _decode(raw, what)
            raw = None
            yield page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            page = None
            if pending is not None and token == match.group(1).decode("ascii"):
                raw = pending.result()
            else:
                raw = fetch(token)
    except ClusterError as exc:
        raise _expired(exc, what)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)


# --- Raw JSON writes ------------------------------------------------------------------

def _raw_request(api, method, path, query, body, content_type, timeout):
    if not hasattr(api, "param_serialize"):  # pragma: no cover - kubernetes < 35
        raise NodeWrightError("this NodeWright needs the kubernetes Python client 35 or newer",
                              hint="pip install -r requirements.txt")
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    method, url, headers, payload, dummy = api.param_serialize(
        method, path, query_params=list(query), header_params=headers,
        body=body, auth_settings=["BearerToken"])
    resp = api.call_api(method, url, header_params=headers, body=payload, _request_timeout=timeout)
    data = resp.read()
    if not 200 <= resp.status <= 299:
        raise ApiException.from_response(http_resp=resp, body=None, data=None)
    return data, dict(resp.getheaders() or {})


def request_json(api, method, path, what, body=None, query=(), content_type="application/json", timeout=None):
    """One request with a JSON body; returns ``(decoded JSON, response headers)``.

    The headers carry the API server's ``Date``, a clock every client of the cluster
    shares (see ``server_time``)."""
    data, headers = call(what, _raw_request, api, method, path, query, body, content_type, timeout)
    return (_decode(data, what) if data else None), headers


def server_time(headers):
    """The API server's clock from a response's ``Date`` header (None when absent)."""
    import email.utils
    value = {k.lower(): v for k, v in (headers or {}).items()}.get("date")
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
