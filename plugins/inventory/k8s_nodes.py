# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Inventory plugin ``nodewright.fleet.k8s_nodes``: the nodes of a Kubernetes cluster,
selected by label, field or NodeWright resource, as Ansible hosts with their GPU
facts, readiness and NodeWright state."""

from __future__ import annotations

DOCUMENTATION = r"""
name: k8s_nodes
short_description: Kubernetes (GPU) nodes as an Ansible inventory
version_added: 0.1.0
author:
  - NodeWright maintainers (@nodewright)
description:
  - Lists the Node objects of a Kubernetes cluster and makes each node a host named after the node.
  - Nodes are chosen by label selector (the full set-based syntax of C(kubectl -l)), by field selector,
    or as exactly the nodes that one C(NodeWright) resource selects (minus nodes labelled
    C(nodewright.io/ignore=true), or upstream NodeWright's C(nodewright.nvidia.com/ignore=true) or
    C(skyhook.nvidia.com/ignore=true)).
  - All facts of a node are in one host variable, a dictionary named by O(host_var) (default C(k8s_node)),
    with labels, annotations, taints, readiness and conditions, node info, capacity, addresses, zone, pool,
    GPU facts derived from GPU Feature Discovery labels and the NodeWright state per resource.
  - Nodes are read with paginated LIST calls and their raw JSON; the optional pod counts come from one
    paginated LIST of the pods of the whole cluster, never from one call per node.
  - The inventory file name must end in C(.k8s_nodes.yml) or C(.k8s_nodes.yaml).
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - nodewright.fleet.k8s_auth
options:
  plugin:
    description: Marks the file as a source of this plugin.
    required: true
    type: str
    choices: [nodewright.fleet.k8s_nodes]
  label_selectors:
    description:
      - Only nodes whose labels match. A string in the syntax of C(kubectl -l) (C(a=b), C(a!=b),
        C(a in (x,y)), C(a notin (x)), C(a), C(!a)), a Kubernetes LabelSelector mapping
        (C(matchLabels), C(matchExpressions)), or a list of these, which must all match.
      - The selector is sent to the API server, so only matching nodes are transferred.
    type: raw
  field_selectors:
    description:
      - Only nodes whose fields match, e.g. C(spec.unschedulable=false) or C(metadata.name!=gpu-7).
        A string (requirements separated by commas) or a list of strings, all of which must match.
    type: raw
  nodewright:
    description:
      - Name of a C(NodeWright) resource (C(nodewrights.nodewright.io), cluster scoped). The inventory
        then holds exactly the nodes its C(spec.nodeSelectors) selects, minus nodes labelled
        C(nodewright.io/ignore=true), further narrowed by O(label_selectors) and O(field_selectors).
      - Its C(spec.podNonInterruptLabels) is the default of O(non_interruptible_selector).
    type: str
  connection:
    description:
      - How Ansible reaches a node.
      - V(ssh) sets C(ansible_connection=ssh) and C(ansible_host) to the node's first address of the types
        in O(address_preference).
      - V(k8s) sets C(ansible_connection=nodewright.fleet.node) (a privileged pod on the node, no SSH) and
        C(ansible_host) to the node name; on a node of the local simulator (annotation
        C(sim.nodewright.io/host-root)) also C(nodewright_node_pod_host_path) to that node's host root, so the
        pod mounts it instead of C(/).
      - V(local) sets C(ansible_connection=local), C(ansible_python_interpreter) to the controller's Python,
        C(ansible_host) to the node name and
        C(nodewright_host_root) to the node's annotation C(sim.nodewright.io/host-root) (the local
        simulator's host root of that node), else C(/).
      - O(compose) runs afterwards, so it can override any of these.
    type: str
    choices: [ssh, k8s, local]
    default: ssh
  address_preference:
    description: Address types, in order of preference, that C(ansible_host) is taken from (V(ssh)).
    type: list
    elements: str
    default: [InternalIP, ExternalIP, Hostname]
  host_var:
    description: Name of the host variable that holds all facts of a node.
    type: str
    default: k8s_node
  node_facts:
    description:
      - Which facts the host variable O(host_var) keeps, by key (C(name) is always kept), of
        C(creation_timestamp), C(labels), C(annotations), C(taints), C(unschedulable), C(ready),
        C(ready_reason), C(conditions), C(node_info), C(capacity), C(allocatable), C(addresses),
        C(provider_id), C(zone), C(pool), C(gpu), C(nodewright), C(ignored), C(pods). Unset, all of them.
      - The default groups, O(compose), O(groups) and O(keyed_groups) still see every fact while the
        inventory is built; only what the hosts carry afterwards is narrowed.
      - For fleets of thousands of nodes synced into AWX/AAP (C(ansible-inventory --list)), whose
        printing of every host variable is most of the run; for example
        C([labels, gpu, ready, unschedulable, nodewright]).
      - A play that reads a left-out fact gets an undefined variable. The rollout strategy reads
        C(labels) and falls back to the API without them.
    type: list
    elements: str
  group_prefix:
    description: Prefix of the names of the default groups.
    type: str
    default: ''
  default_groups:
    description:
      - Which default groups to create.
      - V(gpu) every GPU node; V(gpu_family) C(gpu_family_hopper), C(gpu_family_blackwell);
        V(gpu_model) C(gpu_h100), C(gpu_gb200) ...; V(gpu_product) C(gpu_product_nvidia_h100_80gb_hbm3) ...;
        V(zone) C(zone_<zone>); V(pool) C(pool_<pool>); V(readiness) C(ready) and C(not_ready);
        V(cordoned) C(cordoned); V(nodewright) C(nodewright_<resource>_<status>) and C(nodewright_ignored).
      - Set to an empty list for none.
    type: list
    elements: str
    default: [gpu, gpu_family, gpu_model, gpu_product, zone, pool, readiness, cordoned, nodewright]
  zone_labels:
    description: Labels that give a node's zone, first present wins.
    type: list
    elements: str
    default: [topology.kubernetes.io/zone, failure-domain.beta.kubernetes.io/zone]
  pool_labels:
    description: Labels that give a node's pool (node group), first present wins.
    type: list
    elements: str
    default: [nodepool, karpenter.sh/nodepool, eks.amazonaws.com/nodegroup, cloud.google.com/gke-nodepool,
              kubernetes.azure.com/agentpool, agentpool]
  pod_counts:
    description:
      - Add C(pods) to each node's facts, C({total, gpu, non_interruptible}), counted over the pods that
        are not finished, from one paginated LIST of the pods of the whole cluster.
      - Costs one more LIST (of all pods) per inventory run; off by default.
    type: bool
    default: false
  non_interruptible_selector:
    description:
      - Label selector (string or LabelSelector mapping) of pods that must not be interrupted, such as
        training jobs; counted in C(pods.non_interruptible) when O(pod_counts) is on.
      - Defaults to the C(spec.podNonInterruptLabels) of the O(nodewright) resource; without either,
        C(pods.non_interruptible) is null.
    type: raw
  gpu_resources:
    description: Extended resource names (C(*) patterns allowed) that make a pod a GPU pod.
    type: list
    elements: str
    default: [nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-*]
  page_size:
    description: Objects per LIST page (C(limit)); the rest follows with C(continue) tokens.
    type: int
    default: 500
  request_timeout:
    description: Seconds each API request may take.
    type: int
    default: 60
notes:
  - Values read from the cluster are never trusted as templates, so a label or annotation that
    contains C({{ ... }}) stays text.
  - O(compose), O(groups) and O(keyed_groups) are Jinja2 expressions evaluated once per node; at thousands
    of nodes prefer the default groups, which cost no templating.
  - With O(cache) on, the second run within O(cache_timeout) reads the nodes from the cache and makes no
    API call; C(ansible-inventory --flush-cache) refreshes it. A cache written with other selection
    options is not used.
  - The options O(host), O(api_key), O(context) and O(proxy) may be templates, for example
    C({{ lookup('ansible.builtin.env', 'FLEET_TOKEN') }}).
  - The host variable layout, worked examples and the AWX/AAP set-up are in C(docs/inventory.md) of the
    collection.
"""

EXAMPLES = r"""
# all-gpu.k8s_nodes.yml: every GPU node, reached over SSH at its InternalIP
plugin: nodewright.fleet.k8s_nodes
label_selectors: nvidia.com/gpu.present=true

---
# h100-pool.k8s_nodes.yml: one pool in two zones, Ready and schedulable only
plugin: nodewright.fleet.k8s_nodes
label_selectors:
  - nodepool=h100
  - topology.kubernetes.io/zone in (zone-a,zone-b)
field_selectors: spec.unschedulable=false
keyed_groups:
  - key: k8s_node.gpu.clique
    prefix: clique

---
# kernel-cve.k8s_nodes.yml: the nodes a NodeWright resource targets, through the k8s connection
plugin: nodewright.fleet.k8s_nodes
nodewright: kernel-cve-2025
connection: k8s
pod_counts: true
groups:
  busy: k8s_node.pods.non_interruptible > 0
compose:
  kernel: k8s_node.node_info.kernel_version
cache: true
cache_plugin: ansible.builtin.jsonfile
cache_connection: ~/.cache/nodewright/inventory

---
# simulator.k8s_nodes.yml: the local simulator; each node's host root is a directory
plugin: nodewright.fleet.k8s_nodes
connection: local
"""

import hashlib
import json
import os
import re
import sys
import time

from ansible.errors import AnsibleError, AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable
from ansible.utils.vars import combine_vars

from ansible_collections.nodewright.fleet.plugins.module_utils.fleet.targets import not_ignored
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import nodewright_api
from ansible_collections.nodewright.fleet.plugins.module_utils.node import facts as nf
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ClusterError, NodeWrightError, ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import did_you_mean
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s import names
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.client import (
    AUTH_OPTIONS,
    api_path,
    get_api_client,
    get_json,
    group_path,
    list_pages,
    require_kubernetes,
    resolve_auth,
)
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.markers import API_GROUP, API_VERSION
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import (
    from_label_selector,
    to_selector,
)

NODEWRIGHT_PLURAL = nodewright_api.NODEWRIGHTS
CONNECTIONS = {"ssh": "ssh", "k8s": "nodewright.fleet.node", "local": "local"}
_TEMPLATED_OPTIONS = ("host", "api_key", "context", "proxy")
# Bump when the cached node facts change shape, so an old cache is not used.
CACHE_FORMAT = 1

_FIELD_REQUIREMENT = re.compile(r"^\s*[A-Za-z][A-Za-z0-9_.]*\s*(==|!=|=)\s*[^=!\s]*\s*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class InventoryModule(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = "nodewright.fleet.k8s_nodes"

    def verify_file(self, path):
        if not super().verify_file(path):
            return False
        name = os.path.basename(path)
        return name.endswith((".k8s_nodes.yml", ".k8s_nodes.yaml")) or name in ("k8s_nodes.yml",
                                                                                "k8s_nodes.yaml")

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        try:
            config = self._read_config_data(path)
            self._check_unknown_options(config)
            settings = self._settings()
            started = time.time()
            nodes = self._nodes(path, settings, cache)
            read = time.time()
            self._populate(nodes, settings)
            self.display.vv("%s: %d nodes read in %.2fs, inventory built in %.2fs"
                            % (path, len(nodes), read - started, time.time() - read))
        except (NodeWrightError, AnsibleError) as exc:
            raise AnsibleParserError("%s inventory %s: %s" % (self.NAME, path, _one_line(exc))) from None

    # ----------------------------------------------------------------------------------
    # Options

    def _check_unknown_options(self, config):
        known = set()
        for name, definition in self.option_definitions.items():
            known.add(name)
            known.update(definition.get("aliases") or ())
        unknown = sorted(k for k in config if k not in known)
        if unknown:
            import difflib
            hints = []
            for key in unknown:
                close = difflib.get_close_matches(str(key), sorted(known), n=1)
                if close:
                    hints.append("%s -> %s?" % (key, close[0]))
            raise ValidationError("unknown option%s %s" % ("s" if len(unknown) > 1 else "",
                                                           ", ".join(repr(k) for k in unknown)),
                                  hint=("did you mean: %s" % ", ".join(hints)) if hints else
                                  "see ansible-doc -t inventory %s" % self.NAME)

    def _template(self, value):
        if isinstance(value, str) and "{{" in value:
            return self.templar.template(value)
        return value

    def _settings(self):
        opt = self.get_option
        # Paths are resolved by Ansible before a template could be rendered; strings may be templates.
        auth = {key: self._template(opt(key)) if key in _TEMPLATED_OPTIONS else opt(key) for key in AUTH_OPTIONS}
        selector = to_selector(opt("label_selectors"), "label_selectors")
        fields = _field_selector(opt("field_selectors"))
        name = opt("nodewright")
        if name is not None:
            name = names.nodewright_name(str(name), "nodewright")
        for option in ("zone_labels", "pool_labels"):
            for n, key in enumerate(opt(option) or []):
                names.label_key(key, "%s[%d]" % (option, n))
        non_interruptible = opt("non_interruptible_selector")
        if non_interruptible in (None, "", {}, []):
            non_interruptible = None
        else:
            non_interruptible = to_selector(non_interruptible, "non_interruptible_selector")
        kinds = list(opt("default_groups") or [])
        bad = [k for k in kinds if k not in nf.GROUP_KINDS]
        if bad:
            raise ValidationError("unknown default group kind(s) %s" % ", ".join(map(repr, bad)),
                                  field="default_groups", hint="choose from %s" % ", ".join(nf.GROUP_KINDS))
        host_var = opt("host_var")
        if not _IDENTIFIER.match(host_var or ""):
            raise ValidationError("%r is not a valid variable name" % (host_var,), field="host_var")
        keep = opt("node_facts")
        if keep is not None:
            bad = [k for k in keep if k not in nf.FACT_KEYS]
            if bad:
                near = did_you_mean(bad[0], nf.FACT_KEYS)
                raise ValidationError("unknown fact(s) %s" % ", ".join(map(repr, bad)), field="node_facts",
                                      hint=(near + " " if near else "") + "choose from %s" % ", ".join(nf.FACT_KEYS))
            keep = tuple(["name"] + [k for k in nf.FACT_KEYS if k in keep and k != "name"])
        page_size = opt("page_size")
        if page_size < 1:
            raise ValidationError("must be at least 1, got %d" % page_size, field="page_size")
        return {
            "auth": {k: v for k, v in auth.items() if v is not None},
            "selector": selector,
            "field_selector": fields,
            "nodewright": name,
            "non_interruptible": non_interruptible,
            "pod_counts": opt("pod_counts"),
            "gpu_resources": list(opt("gpu_resources") or []),
            "zone_labels": list(opt("zone_labels") or []),
            "pool_labels": list(opt("pool_labels") or []),
            "page_size": page_size,
            "timeout": opt("request_timeout"),
            "connection": opt("connection"),
            "address_preference": list(opt("address_preference") or []),
            "host_var": host_var,
            "node_facts": keep,
            "group_prefix": nf.safe_group_part(opt("group_prefix")) if opt("group_prefix") else "",
            "group_kinds": kinds,
        }

    # ----------------------------------------------------------------------------------
    # Reading the cluster (or the cache)

    def _fingerprint(self, settings):
        auth = resolve_auth(settings["auth"])
        source = {
            "format": CACHE_FORMAT,
            "server": auth.get("host"), "context": auth.get("context"),
            "kubeconfig": auth.get("kubeconfig") or os.environ.get("KUBECONFIG"),
            "selector": settings["selector"].to_string(), "fields": settings["field_selector"],
            "nodewright": settings["nodewright"], "pod_counts": settings["pod_counts"],
            "non_interruptible": settings["non_interruptible"].to_string()
            if settings["non_interruptible"] is not None else None,
            "gpu_resources": settings["gpu_resources"], "zone_labels": settings["zone_labels"],
            "pool_labels": settings["pool_labels"],
        }
        return hashlib.sha256(json.dumps(source, sort_keys=True).encode()).hexdigest()

    def _nodes(self, path, settings, cache):
        use_cache = bool(self.get_option("cache"))
        if not use_cache:
            return self._fetch(settings)
        key = self.get_cache_key(path)
        fingerprint = self._fingerprint(settings)
        if cache:
            try:
                cached = self._cache[key]
            except KeyError:
                cached = None
            if isinstance(cached, dict) and cached.get("fingerprint") == fingerprint:
                self.display.vvv("%s: %d nodes from the inventory cache" % (path, len(cached["nodes"])))
                return cached["nodes"]
        nodes = self._fetch(settings)
        self._cache[key] = {"fingerprint": fingerprint, "nodes": nodes}
        return nodes

    def _fetch(self, settings):
        require_kubernetes()
        api = get_api_client(settings["auth"])
        target = getattr(api, "nodewright_target", None) or "the API server"
        selector = settings["selector"]
        non_interruptible = settings["non_interruptible"]
        if settings["nodewright"]:
            resource = self._read_nodewright(api, settings["nodewright"], target, settings["timeout"])
            spec = resource.get("spec") or {}
            where = "NodeWright %s spec" % settings["nodewright"]
            selector = selector.and_(from_label_selector(spec.get("nodeSelectors"), where + ".nodeSelectors"))
            selector = selector.and_(not_ignored())
            if non_interruptible is None and spec.get("podNonInterruptLabels"):
                non_interruptible = from_label_selector(spec["podNonInterruptLabels"],
                                                        where + ".podNonInterruptLabels")
        zone_labels, pool_labels = settings["zone_labels"], settings["pool_labels"]
        query = []
        if not selector.empty:
            query.append(("labelSelector", selector.to_string()))
        if settings["field_selector"]:
            query.append(("fieldSelector", settings["field_selector"]))
        nodes = []
        for items in list_pages(api, api_path("v1", "nodes"), "listing the nodes of %s" % target, query,
                                settings["page_size"], settings["timeout"]):
            nodes.extend(nf.node_facts(node, zone_labels, pool_labels) for node in items)
        if settings["pod_counts"]:
            counter = nf.PodCounter(settings["gpu_resources"], non_interruptible)
            for items in list_pages(api, api_path("v1", "pods"), "listing the pods of %s" % target,
                                    [("fieldSelector", "status.phase!=Succeeded,status.phase!=Failed")],
                                    settings["page_size"], settings["timeout"]):
                counter.add(items)
            for facts in nodes:
                facts["pods"] = counter.for_node(facts["name"])
        return nodes

    @staticmethod
    def _read_nodewright(api, name, target, timeout):
        what = "reading NodeWright %s at %s" % (name, target)
        try:
            return nodewright_api.get(api, NODEWRIGHT_PLURAL, name, what, timeout=timeout, field="nodewright")
        except ClusterError as exc:
            if exc.details.get("status") != 404:
                raise
        # 404: either no such resource, or no NodeWright API at all.
        try:
            get_json(api, group_path(nodewright_api.GROUP_VERSION), what, timeout=timeout)
        except ClusterError as exc:
            if exc.details.get("status") != 404:
                raise
            raise ClusterError("%s: the cluster does not serve %s.%s/%s"
                               % (what, NODEWRIGHT_PLURAL, API_GROUP, API_VERSION),
                               hint="install NodeWright's CRDs: kubectl apply -f deploy/crds/")
        raise ClusterError("NodeWright %r does not exist in the cluster at %s" % (name, target),
                           hint="kubectl get nodewrights lists the existing ones; check the nodewright option")

    # ----------------------------------------------------------------------------------
    # Building the inventory

    def _compose(self, template, variables, disable_lookups=...):
        """Plain variable paths (``k8s_node.gpu.model``) are looked up directly; Jinja2 costs
        some hundred microseconds per host and expression, which at thousands of nodes is
        seconds per ``compose`` entry or keyed group. Everything else goes to Jinja2."""
        path = self._simple_paths.get(template, _MISSING) if isinstance(template, str) else None
        if path is _MISSING:
            path = self._simple_paths[template] = parse_simple_path(template)
        if path is not None:
            value = resolve_simple_path(path, self._scopes(variables))
            if value is not _MISSING:
                # as Jinja2 would have left it: keyed_groups' parent_group is templated next
                self.templar.available_variables = (combine_vars(variables, self._vars) if self._use_extra_vars
                                                    else variables)
                return value
        return super()._compose(template, variables)

    def _scopes(self, variables):
        if self._use_extra_vars and self._vars:
            return (self._vars, variables)
        return (variables,)

    def _conditional_groups(self, groups, variables, host, strict):
        """``groups``: like Constructable's, with the same fast path for simple tests."""
        for group_name, conditional in groups.items():
            parsed = self._simple_conditions.get(conditional, _MISSING) if isinstance(conditional, str) else None
            if parsed is _MISSING:
                parsed = self._simple_conditions[conditional] = parse_simple_condition(conditional)
            result = _MISSING
            if parsed is not None:
                value = resolve_simple_path(parsed[0], self._scopes(variables))
                if value is not _MISSING:
                    if parsed[1] == "==":
                        result = value == parsed[2]
                    elif parsed[1] == "!=":
                        result = value != parsed[2]
                    elif isinstance(value, bool):
                        result = value
            if result is _MISSING:
                self.templar.available_variables = (combine_vars(variables, self._vars) if self._use_extra_vars
                                                    else variables)
                try:
                    result = self.templar.evaluate_conditional(conditional)
                except Exception as exc:
                    if strict:
                        raise AnsibleParserError("Could not add host %s to group %s: %s" % (host, group_name, exc))
                    continue
            if result:
                group = self.inventory.add_group(self._sanitize_group_name(group_name))
                self.inventory.add_child(group, host)

    def _facts_sink(self):
        """Where to put the (large) facts variable of each host, and how to mark its values.

        ansible-core 2.19 hands inventory plugins a proxy whose ``set_variable`` copies every
        value and tags each string with its origin; node facts hold a hundred and more strings
        per node, and at thousands of nodes that copy cost more than reading the cluster. The
        facts come from the API and are set untagged on the inventory itself: untagged strings
        are never trusted as templates. Before 2.19 there is no proxy and strings were trusted
        unless wrapped as unsafe, so they are wrapped there.
        """
        raw = getattr(self.inventory, "__wrapped__", None)
        if raw is not None:
            return raw, None
        from ansible.utils.unsafe_proxy import wrap_var
        return self.inventory, wrap_var

    def _populate(self, nodes, settings):
        inv = self.inventory
        sink, mark = self._facts_sink()
        host_var = settings["host_var"]
        keep = settings["node_facts"]
        connection = settings["connection"]
        ansible_connection = CONNECTIONS[connection]
        preference = settings["address_preference"]
        prefix, kinds = settings["group_prefix"], settings["group_kinds"]
        strict = self.get_option("strict")
        compose = self.get_option("compose") or {}
        groups = self.get_option("groups") or {}
        keyed_groups = self.get_option("keyed_groups") or []
        created = set()
        self._simple_paths, self._simple_conditions = {}, {}
        self._use_extra_vars = bool(self.get_option("use_extra_vars"))
        for facts in nodes:
            name = facts["name"]
            inv.add_host(name)
            variables = {host_var: facts, "ansible_connection": ansible_connection}
            if connection == "ssh":
                variables["ansible_host"] = nf.choose_address(facts.get("addresses"), preference) or name
            else:
                variables["ansible_host"] = name
            if connection == "local":
                variables["nodewright_host_root"] = nf.host_root(facts)
                # Tasks run in this controller's Python (interpreter discovery could pick
                # another one without the collection's dependencies).
                variables["ansible_python_interpreter"] = sys.executable
            elif connection == "k8s" and nf.host_root(facts) != "/":
                # A simulator node: its node pod mounts the node's own host root, never the
                # machine's /.
                variables["nodewright_node_pod_host_path"] = nf.host_root(facts)
            for key, value in variables.items():
                if key == host_var and keep is not None:
                    value = {k: value[k] for k in keep if k in value}
                sink.set_variable(name, key, mark(value) if mark else value)
            for group in nf.default_groups(facts, prefix, kinds):
                if group not in created:
                    inv.add_group(group)
                    created.add(group)
                inv.add_child(group, name)
            for varname, expression in compose.items():
                try:
                    value = self._compose(expression, variables)
                except Exception as exc:
                    if strict:
                        raise AnsibleParserError("compose %s for host %s: %s" % (varname, name, exc))
                    continue
                inv.set_variable(name, varname, value)
                variables[varname] = value
            if groups:
                self._conditional_groups(groups, variables, name, strict)
            if keyed_groups:
                self._add_host_to_keyed_groups(keyed_groups, variables, name, strict, fetch_hostvars=False)


_MISSING = object()
_SIMPLE_TOKEN = re.compile(r"""\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*(?:'([^'\\]*)'|"([^"\\]*)"|(-?[0-9]+))\s*\]""")
_SIMPLE_ROOT = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)")
_SIMPLE_LITERAL = re.compile(r"""\s*(?:'([^'\\]*)'|"([^"\\]*)"|(-?[0-9]+)|(true|True|false|False|none|None))\s*$""")
_LITERALS = {"true": True, "True": True, "false": False, "False": False, "none": None, "None": None}


def parse_simple_path(text):
    """``k8s_node.labels['nodepool']`` -> ``("k8s_node", [("attr", "labels"), ("item", "nodepool")])``.

    None when ``text`` is anything but a plain variable path, which then goes to Jinja2.
    """
    if not isinstance(text, str):
        return None
    m = _SIMPLE_ROOT.match(text)
    if not m:
        return None
    root, pos, steps, end = m.group(1), m.end(), [], len(text.rstrip())
    while pos < end:
        m = _SIMPLE_TOKEN.match(text, pos)
        if not m:
            return None
        if m.group(1) is not None:
            steps.append(("attr", m.group(1)))
        elif m.group(4) is not None:
            steps.append(("item", int(m.group(4))))
        else:
            steps.append(("item", m.group(2) if m.group(2) is not None else m.group(3)))
        pos = m.end()
    if root in _LITERALS:
        return None
    return root, steps


def resolve_simple_path(path, scopes):
    """The value of a parsed path, or ``_MISSING`` whenever Jinja2 might answer differently
    (an attribute that is also a dict method, a missing key, an index out of range)."""
    root, steps = path
    for scope in scopes:
        if root in scope:
            value = scope[root]
            break
    else:
        return _MISSING
    for kind, key in steps:
        if isinstance(value, dict):
            if kind == "attr" and hasattr(dict, key):
                return _MISSING
            if key not in value:
                return _MISSING
            value = value[key]
        elif isinstance(value, list) and kind == "item" and isinstance(key, int) and -len(value) <= key < len(value):
            value = value[key]
        else:
            return _MISSING
    return value


def parse_simple_condition(text):
    """``PATH``, ``PATH == LITERAL`` or ``PATH != LITERAL`` as ``(path, op, literal)``; else None."""
    if not isinstance(text, str):
        return None
    for op in ("==", "!="):
        if op in text:
            left, _op, right = text.partition(op)
            path = parse_simple_path(left)
            m = _SIMPLE_LITERAL.match(right)
            if path is None or not m:
                return None
            if m.group(1) is not None or m.group(2) is not None:
                literal = m.group(1) if m.group(1) is not None else m.group(2)
            elif m.group(3) is not None:
                literal = int(m.group(3))
            else:
                literal = _LITERALS[m.group(4)]
            return path, op, literal
    path = parse_simple_path(text)
    return (path, None, None) if path is not None else None


def _one_line(exc):
    """The message of an error and of its causes, each said once."""
    text = str(exc)
    if getattr(exc, "_help_text", None):
        text = "%s %s" % (text, exc._help_text)
    cause = exc.__cause__
    while cause is not None:
        more = str(cause)
        if text.rstrip(". ") in more:
            text = more
        elif more and more not in text:
            text = "%s: %s" % (text, more)
        cause = cause.__cause__
    return text


def _field_selector(value):
    """Validate field selectors (string or list) and join them for the API."""
    if value in (None, "", []):
        return ""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise ValidationError("must be a string or a list of strings, got %s" % type(value).__name__,
                              field="field_selectors")
    parts = []
    for n, item in enumerate(items):
        if not isinstance(item, str):
            raise ValidationError("must be a string, got %s" % type(item).__name__,
                                  field="field_selectors[%d]" % n)
        for requirement in item.split(","):
            if not _FIELD_REQUIREMENT.match(requirement):
                raise ValidationError("cannot parse field selector requirement %r" % requirement.strip(),
                                      field="field_selectors[%d]" % n,
                                      hint="use FIELD=VALUE, FIELD==VALUE or FIELD!=VALUE, e.g. "
                                           "spec.unschedulable=false")
            parts.append(re.sub(r"\s+", "", requirement))
    return ",".join(parts)
