# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Names the dead-code check (`make lint`: vulture over plugins, cli, simulator and bench)
cannot see used: what ansible-core, the standard library or a third-party library reads
or calls by name, and the few definitions kept on purpose for another reason (each says
why). Not a test module; vulture reads it with the code it checks.

An entry is an attribute of ``_`` named as the definition is; it whitelists that name
wherever it is defined, so keep the list to names that really are used by convention."""


class _Names(object):
    def __getattr__(self, name):
        return None


_ = _Names()

# --- ansible-core: plugin documentation and the classes its plugin loader looks up by name
_plugin_loader = (
    _.DOCUMENTATION,
    _.EXAMPLES,
    _.RETURN,
    _.ModuleDocFragment,  # doc_fragments
    _.FilterModule,  # filter plugins
    _.filters,
    _.InventoryModule,  # inventory plugins
)

# --- ansible-core: class attributes and hooks its callers read or call
_ansible_core = (
    _.TRANSFERS_FILES,  # ActionBase
    _.CALLBACK_VERSION,  # CallbackBase
    _.CALLBACK_TYPE,
    _.CALLBACK_NAME,
    _.CALLBACK_NEEDS_ENABLED,
    _.v2_playbook_on_start,
    _.v2_playbook_on_task_start,
    _.v2_runner_on_start,
    _.v2_runner_on_ok,
    _.v2_runner_on_failed,
    _.v2_runner_on_unreachable,
    _.v2_runner_on_skipped,
    _.v2_playbook_on_stats,
    _.has_pipelining,  # ConnectionBase
    _.default_user,
    _._connected,
    _.available_variables,  # Templar, set on the inventory's templar
    _.cur_task,  # PlayIterator, reset by the strategy
    # The in-process worker stands in for a WorkerProcess: what the task queue manager and
    # the strategy read of one, and the loader's temporary files.
    _.exitcode,
    _.worker_queue,
    _._tempfiles,
)

# --- the standard library and the Kubernetes client
_libraries = (
    _.do_GET,  # http.server.BaseHTTPRequestHandler
    _.log_message,
    _.daemon_threads,  # socketserver.ThreadingMixIn
    _.gid,  # tarfile.TarInfo
    _.gname,
    _.api_key,  # kubernetes.client.Configuration
)

# --- parameters a signature must have: signal handlers, __exit__, ansible-core's hooks
_parameters = (
    _.frame,
    _.tb,
    _.is_conditional,
    _.disable_lookups,
    # What an unpacking does not use (ansible-test's pylint takes ``dummy`` for that).
    _.dummy,
)

# --- kept on purpose
_kept = (
    # The tuning package's observation vocabulary, shared with its shell steps (observe.sh
    # prints them, verdict.sh applies the rules); the unit tests hold the two sides together.
    _.UNAVAILABLE,
    _.CHECK_RULES,
    # What the nvidia_tuning role probes on the host before resolving: its vars list the same
    # probes, and a unit test keeps them in step (roles/nvidia_tuning/vars/main.yml).
    _.host_probes,
    # The RBAC the node connection needs, asserted against the chart's Role by the
    # integration tests (tests/integration/test_node_connection.py).
    _.REQUIRED_PERMISSIONS,
    # How many images a resolver pulled: the unit tests tell a cache hit from a pull by it.
    _.pulls,
    # Run plan fields read only through the serialized plan: by playbooks/rollout.yml
    # (repaired), playbooks/templates/plan.txt.j2 (protected, soak) and the plan file a
    # user reads (held_by).
    _.repaired,
    _.protected,
    _.soak,
    _.held_by,
    # Package spec fields read by the package module from the spec's mapping (PackageSpec.to_dict).
    _.stage_retries,
    _.refuse_downgrade,
)
