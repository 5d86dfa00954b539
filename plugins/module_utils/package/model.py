# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The NodeWright package format: a directory with a manifest, step scripts and
files to lay onto the host; loaded, validated and turned into one model.

Two directory layouts load into the same ``Package``:

* NodeWright: ``package.json`` (or ``package.yaml``, read on the controller by the
  action plugin), ``steps/`` with the step scripts, ``files/`` laid onto the host;
* Skyhook (agent schema v1): ``config.json``, ``skyhook_dir/`` and ``root_dir/``,
  so existing Skyhook packages run unmodified.

Validation collects every problem it finds and raises one ``PackageError`` whose
``errors`` list each carry the package, the field path (``stages.apply[0].path``),
the manifest file and the line, and a hint that says how to fix it. Stdlib only:
this module also runs on the node.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat

from ansible_collections.nodewright.fleet.plugins.module_utils.common import safe_load
from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import ValidationError
from ansible_collections.nodewright.fleet.plugins.module_utils.common.validation import field_path as _join
from ansible_collections.nodewright.fleet.plugins.module_utils.package import interrupts as _interrupts
from ansible_collections.nodewright.fleet.plugins.module_utils.package.interrupts import config_key_matches
from ansible_collections.nodewright.fleet.plugins.module_utils.package.jsonlines import parse_json_manifest
from ansible_collections.nodewright.fleet.plugins.module_utils.package.versions import is_version

NAME_RE = re.compile(r"^[a-z][-a-z0-9]{0,41}[a-z]$")
# Skyhook's config.json puts no rule on package_name (nvidia_tuned exists); the
# name a NodeWright resource gives the package must still match NAME_RE.
SKYHOOK_NAME_RE = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]*$")
STEP_NAME_RE = re.compile(r"^[a-zA-Z0-9_.-]+$")
CONFIG_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
STAGES = ("apply", "config", "upgrade", "uninstall", "post-interrupt")
CHECK_SUFFIX = "-check"
ALL_STAGES = tuple(s for stage in STAGES for s in (stage, stage + CHECK_SUFFIX))

FORMAT_NATIVE = "nodewright"
FORMAT_SKYHOOK = "skyhook"
MANIFEST_JSON = "package.json"
MANIFEST_YAML = "package.yaml"
MANIFEST_SKYHOOK = "config.json"
# (steps directory, files laid onto the host) per format
LAYOUT = {FORMAT_NATIVE: ("steps", "files"), FORMAT_SKYHOOK: ("skyhook_dir", "root_dir")}
DEFAULT_STEP_TIMEOUT = 1800

NATIVE_FIELDS = ("name", "version", "description", "stages", "interrupt", "configInterrupts",
                 "dependsOn", "expectedConfig", "defaultConfig", "configScripts", "hostSettings", "resolver")
# Kinds of host setting a package's config may declare it writes (``hostSettings``): two
# resources writing one of them on a node with different values are refused.
HOST_SETTING_KINDS = ("sysctl", "cmdline")
# Controller-side resolvers that ship with the collection (``resolver``): they turn a
# package's config into per-node settings before the package runs (package/resolvers.py).
RESOLVERS = ("nvidia-tuning",)
STEP_FIELDS = ("name", "path", "arguments", "env", "returncodes", "idempotent", "upgrade_step",
               "on_host", "timeout")
SKYHOOK_STEP_FIELDS = {"name": "name", "path": "path", "arguments": "arguments", "env": "env",
                       "returncodes": "returncodes", "idempotence": "idempotent",
                       "upgrade_step": "upgrade_step", "on_host": "on_host", "timeout": "timeout"}


# --------------------------------------------------------------------------- config

def render_config_value(value):
    """The text a config value becomes in its file under ``configmaps/``."""
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def config_hashes(config):
    """Per-key digests of a config mapping: what the node state records, so a later
    run can tell which keys changed without keeping the values on the node."""
    return {key: hashlib.sha256(render_config_value(value).encode("utf-8")).hexdigest()[:16]
            for key, value in sorted((config or {}).items())}


# --------------------------------------------------------------------------- model

class Interrupt(object):
    """What the node must undergo after a stage: reboot, restart of some services,
    restart of all services, or nothing."""

    __slots__ = ("type", "services")

    def __init__(self, type="noop", services=()):
        self.type = type
        self.services = tuple(sorted(set(services)))

    def to_dict(self):
        return {"type": self.type, "services": list(self.services)}

    def __eq__(self, other):
        return isinstance(other, Interrupt) and (self.type, self.services) == (other.type, other.services)

    def __repr__(self):
        return "Interrupt(%r, %r)" % (self.type, self.services)


class Step(object):
    """One script run in a stage. ``idempotent`` means the script manages its own
    idempotence and always runs; other steps run once and leave a flag."""

    __slots__ = ("name", "path", "arguments", "env", "returncodes", "idempotent", "upgrade_step",
                 "on_host", "timeout")

    def __init__(self, path, name=None, arguments=(), env=None, returncodes=(0,), idempotent=False,
                 upgrade_step=False, on_host=True, timeout=DEFAULT_STEP_TIMEOUT):
        self.path = path
        self.name = name or path
        self.arguments = tuple(arguments)
        self.env = dict(env or {})
        self.returncodes = tuple(returncodes) or (0,)
        self.idempotent = bool(idempotent)
        self.upgrade_step = bool(upgrade_step)
        self.on_host = bool(on_host)
        self.timeout = timeout

    def fingerprint(self):
        """Changes when what the step runs changes, so a flag of an edited step is stale."""
        payload = json.dumps([self.path, list(self.arguments), sorted(self.env.items()),
                              list(self.returncodes), self.on_host], sort_keys=True)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:12]

    def to_dict(self):
        return {"name": self.name, "path": self.path, "arguments": list(self.arguments),
                "env": dict(self.env), "returncodes": list(self.returncodes),
                "idempotent": self.idempotent, "upgrade_step": self.upgrade_step,
                "on_host": self.on_host, "timeout": self.timeout}


class Package(object):
    """A validated package. ``root`` is its directory (None for a manifest checked
    without its files)."""

    def __init__(self, name, version, description="", stages=None, interrupt=None,
                 config_interrupts=None, depends_on=None, expected_config=(), default_config=None,
                 root=None, format=FORMAT_NATIVE, source=None, config_scripts=None, host_settings=None,
                 resolver=None):
        self.name = name
        self.version = version
        self.description = description
        self.stages = {s: tuple((stages or {}).get(s, ())) for s in ALL_STAGES}
        self.interrupt = interrupt or Interrupt()
        self.config_interrupts = dict(config_interrupts or {})
        self.depends_on = dict(depends_on or {})
        self.expected_config = tuple(expected_config)
        self.default_config = dict(default_config or {})
        # stage -> the config keys that may supply the script the stage's steps run
        # (shellscript: apply.sh, apply_check.sh or apply-check.sh, ...)
        self.config_scripts = {k: tuple(v) for k, v in (config_scripts or {}).items()}
        # kind -> "*" (every config key is a setting of that kind) or {setting: config key}
        self.host_settings = dict(host_settings or {})
        self.resolver = resolver
        self.root = root
        self.format = format
        self.source = source

    @property
    def steps_dirname(self):
        return LAYOUT[self.format][0]

    @property
    def files_dirname(self):
        return LAYOUT[self.format][1]

    def steps(self, stage):
        return self.stages.get(stage, ())

    def effective_config(self, config=None):
        merged = dict(self.default_config)
        merged.update(config or {})
        return merged

    def validate_config(self, config=None, field="config"):
        """Raise ``PackageError`` when the config misses an expected key, uses a key that
        cannot be a file name under ``configmaps/``, or supplies a stage's script
        without the script of its check (``configScripts``): a check that is declared
        but not supplied would never run. ``field`` is where the config sits in the
        input (``spec.packages.<name>.configMap``); errors name ``<field>.<key>``."""
        ctx = _Context(self.name, source=None, lines=None)
        effective = self.effective_config(config)
        for key in sorted(effective):
            if not isinstance(key, str) or not CONFIG_KEY_RE.match(key) or key in (".", ".."):
                ctx.error((field, key), "config key %r cannot be a file name" % (key,),
                          "use letters, digits, '-', '_' and '.' (the rules of ConfigMap keys)")
        for key in self.expected_config:
            if key not in effective:
                ctx.error((field, key), "expected config key %r is not supplied" % key,
                          "add %r to the package's config (the manifest lists it in %s)"
                          % (key, "expected_config_files" if self.format == FORMAT_SKYHOOK
                             else "expectedConfig"))
        for stage in ALL_STAGES:
            names = [k for k in self.config_scripts.get(stage, ()) if k in effective]
            if len(names) > 1:
                ctx.error((field, names[1]), "the config supplies %s for stage %s; give one"
                          % (" and ".join(names), stage), "keep %s and remove %s" % (names[0], names[1]))
        for stage in STAGES:
            check = stage + CHECK_SUFFIX
            script = self.config_script(stage, effective)
            if script and check in self.config_scripts and not self.config_script(check, effective):
                wanted = self.config_scripts[check]
                ctx.error((field, wanted[0]), "the config supplies %s for stage %s but no script for its check %s, "
                          "so nothing would verify what %s did" % (script, stage, check, script),
                          "add %s: a script that exits 0 when %s's work is in place%s"
                          % (wanted[0], script, (" (%s is accepted too)" % ", ".join(wanted[1:]))
                             if len(wanted) > 1 else ""))
        ctx.raise_if_errors()
        return effective

    def config_script(self, stage, config):
        """The config key that supplies ``stage``'s script, or None (the stage has no
        script from the config, or takes none)."""
        for key in self.config_scripts.get(stage, ()):
            if key in (config or {}):
                return key
        return None

    def interrupts_for_keys(self, keys):
        return [interrupt for key in keys for pattern, interrupt in sorted(self.config_interrupts.items())
                if config_key_matches(pattern, key)]

    def to_dict(self):
        """The package in the native manifest's shape (JSON-serialisable)."""
        return {
            "name": self.name, "version": self.version, "description": self.description,
            "format": self.format,
            "stages": {s: [step.to_dict() for step in steps] for s, steps in self.stages.items() if steps},
            "interrupt": self.interrupt.to_dict(),
            "configInterrupts": {k: v.to_dict() for k, v in sorted(self.config_interrupts.items())},
            "dependsOn": dict(self.depends_on),
            "expectedConfig": list(self.expected_config),
            "defaultConfig": dict(self.default_config),
            "configScripts": {k: list(v) for k, v in sorted(self.config_scripts.items())},
            "hostSettings": {k: (v if v == "*" else dict(v)) for k, v in sorted(self.host_settings.items())},
            "resolver": self.resolver,
        }

    def settings_from_config(self, config):
        """``{"kind:setting": value}`` the config writes on the host, from ``hostSettings``."""
        out = {}
        config = config or {}
        for kind, mapping in sorted(self.host_settings.items()):
            if mapping == "*":
                pairs = [(key, key) for key in config]
            else:
                pairs = [(setting, key) for setting, key in mapping.items() if key in config]
            for setting, key in pairs:
                out["%s:%s" % (kind, setting)] = config[key]
        return out

    def __repr__(self):
        return "Package(%r, %r, format=%r)" % (self.name, self.version, self.format)


# --------------------------------------------------------------------------- errors

class PackageError(ValidationError):
    """A package failed validation. ``errors`` holds one ``ValidationError`` per
    problem; the exception itself reads as the first, followed by the rest."""

    def __init__(self, errors):
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.reason, field=first.field, hint=first.hint, source=first.source,
                         line=first.line)
        self.text = "\n".join(["%d problem(s):" % len(self.errors)] + ["- " + str(e) for e in self.errors]) \
            if len(self.errors) > 1 else ValidationError.__str__(self)

    def __str__(self):
        return self.text


def field_path(parts):
    """``("stages", "apply", 0, "path")`` -> ``stages.apply[0].path``; keys join with a
    dot whatever they hold (``configInterrupts.kernel.*``), as everywhere in NodeWright
    (``common/validation.field_path``)."""
    out = ""
    for part in parts:
        out = _join(out, part)
    return out


class _Context(object):
    """Collects errors for one package, attaching the line of each field."""

    def __init__(self, package, source, lines):
        self.package = package
        self.source = source
        self.lines = lines or {}
        self.errors = []

    def line_of(self, parts):
        parts = tuple(parts)
        while parts:
            if parts in self.lines:
                return self.lines[parts]
            parts = parts[:-1]
        return self.lines.get(())

    def error(self, parts, message, hint=None, field=None):
        label = "package %r" % self.package if self.package else "package"
        self.errors.append(ValidationError("%s: %s" % (label, message), field=field or field_path(parts) or None,
                                           hint=hint, source=self.source, line=self.line_of(parts)))

    def error_from(self, exc, parts):
        """Record a ``ValidationError`` raised for the value at ``parts``."""
        self.error(tuple(parts) + tuple(getattr(exc, "subpath", ())), exc.reason, exc.hint, field=exc.field)

    def raise_if_errors(self):
        if self.errors:
            raise PackageError(self.errors)


# --------------------------------------------------------------------------- validation

def _check_type(ctx, parts, value, types, what):
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        ctx.error(parts, "must be %s, got %s" % (what, _type_name(value)), "write it as %s" % what)
        return False
    return True


def _as_tuple(types):
    return types if isinstance(types, tuple) else (types,)


def _type_name(value):
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def _string_list(ctx, parts, value):
    if not _check_type(ctx, parts, value, list, "a list of strings"):
        return []
    ok = []
    for n, item in enumerate(value):
        if _check_type(ctx, parts + (n,), item, str, "a string"):
            ok.append(item)
    return ok


def _string_map(ctx, parts, value, key_re=None, key_hint=None):
    if not _check_type(ctx, parts, value, dict, "a mapping of strings"):
        return {}
    ok = {}
    for key, item in value.items():
        if key_re is not None and not key_re.match(key):
            ctx.error(parts + (key,), "invalid name %r" % key, key_hint)
            continue
        if _check_type(ctx, parts + (key,), item, str, "a string"):
            ok[key] = item
    return ok


def parse_interrupt(ctx, parts, value):
    """An interrupt from ``{type, services}`` (``interrupts.parse_interrupt``, the one
    validator); records errors in ``ctx``."""
    try:
        parsed = _interrupts.parse_interrupt(value, field_path(parts))
    except ValidationError as exc:
        ctx.error_from(exc, parts)
        return None
    return Interrupt(parsed["type"], parsed["services"])


def _parse_step(ctx, parts, raw, stage, fmt):
    if not _check_type(ctx, parts, raw, dict, "a mapping describing a step"):
        return None
    if fmt == FORMAT_SKYHOOK:
        data = {}
        for key, value in raw.items():
            if key in SKYHOOK_STEP_FIELDS:
                data[SKYHOOK_STEP_FIELDS[key]] = (key, value)
        # Skyhook's schema allows further fields (requires_interrupt, ...): ignore them.
    else:
        unknown = sorted(set(raw) - set(STEP_FIELDS))
        for key in unknown:
            ctx.error(parts + (key,), "unknown step field %r" % key, "allowed: %s" % ", ".join(STEP_FIELDS))
        data = {k: (k, v) for k, v in raw.items() if k in STEP_FIELDS}

    def get(name, default=None):
        return data[name][1] if name in data else default

    def where(name):
        return parts + (data[name][0] if name in data else name,)

    path = get("path")
    if path is None:
        ctx.error(parts, "step has no 'path'", "give the script's path relative to the package's %s/"
                  % LAYOUT[fmt][0])
        return None
    if not _check_type(ctx, where("path"), path, str, "a string"):
        return None
    if not path or os.path.isabs(path) or ".." in path.split("/"):
        ctx.error(where("path"), "step path %r must be relative to %s/ and stay inside it" % (path, LAYOUT[fmt][0]),
                  "put the script under %s/ and give its path from there, e.g. apply.sh" % LAYOUT[fmt][0])
        return None
    name = get("name", path)
    if not isinstance(name, str) or not STEP_NAME_RE.match(name):
        if "name" in data:
            ctx.error(where("name"), "invalid step name %r" % (name,), "use letters, digits, '_', '-' and '.'")
        name = re.sub(r"[^a-zA-Z0-9_.-]", "_", path)
    arguments = _string_list(ctx, where("arguments"), get("arguments", []))
    env = _string_map(ctx, where("env"), get("env", {}) or {}, ENV_NAME_RE,
                      "environment variable names are letters, digits and '_'")
    returncodes = get("returncodes", [0])
    if not isinstance(returncodes, list) or not returncodes or not all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in returncodes):
        ctx.error(where("returncodes"), "returncodes must be a non-empty list of exit codes (0-255)",
                  "e.g. [0] or [0, 2]")
        returncodes = [0]
    flags = {}
    for flag, default in (("idempotent", False), ("upgrade_step", False), ("on_host", True)):
        value = get(flag, default)
        if not isinstance(value, bool):
            ctx.error(where(flag), "must be true or false, got %s" % _type_name(value), "write true or false")
            value = default
        flags[flag] = value
    timeout = get("timeout", DEFAULT_STEP_TIMEOUT)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or timeout <= 0:
        ctx.error(where("timeout"), "timeout must be a positive number of seconds",
                  "e.g. 600; leave it out for the default of %d" % DEFAULT_STEP_TIMEOUT)
        timeout = DEFAULT_STEP_TIMEOUT
    if flags["upgrade_step"]:
        if not stage.startswith("upgrade"):
            ctx.error(where("upgrade_step"), "upgrade_step is only meaningful in upgrade and upgrade-check",
                      "remove it, or move the step to the upgrade stage")
        if arguments:
            ctx.error(where("arguments"), "an upgrade step takes no arguments: it is given the previous and "
                      "the current version", "remove the arguments")
    return Step(path, name=name, arguments=arguments, env=env, returncodes=returncodes,
                idempotent=flags["idempotent"], upgrade_step=flags["upgrade_step"],
                on_host=flags["on_host"], timeout=timeout)


def _parse_stages(ctx, parts, value, fmt, stage_word):
    stages = {}
    if not _check_type(ctx, parts, value, dict, "a mapping of stage name to a list of steps"):
        return stages
    for stage, raw_steps in value.items():
        if stage not in ALL_STAGES:
            ctx.error(parts + (stage,), "unknown %s %r" % (stage_word, stage), "one of %s" % ", ".join(ALL_STAGES))
            continue
        if raw_steps is None:
            raw_steps = []
        if not _check_type(ctx, parts + (stage,), raw_steps, list, "a list of steps"):
            continue
        steps = []
        for n, raw in enumerate(raw_steps):
            step = _parse_step(ctx, parts + (stage, n), raw, stage, fmt)
            if step is not None:
                steps.append(step)
        names = [s.name for s in steps]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            ctx.error(parts + (stage,), "two steps of %s %r are named %r" % (stage_word, stage, dup),
                      "give each step a distinct name: logs and flags are keyed by it")
        stages[stage] = steps
    for stage in STAGES:
        if stages.get(stage) and not stages.get(stage + CHECK_SUFFIX):
            ctx.error(parts + (stage,), "%s %r has steps but %r has none" % (stage_word, stage, stage + CHECK_SUFFIX),
                      "add a %s step that verifies what %s did" % (stage + CHECK_SUFFIX, stage))
    if not any(stages.values()):
        ctx.error(parts, "the package has no steps", "add at least an apply or config stage with its check")
    return stages


def _check_scripts(ctx, root, fmt, stages, stages_key):
    steps_dir = os.path.join(root, LAYOUT[fmt][0])
    real_root = os.path.realpath(root)
    for stage, steps in stages.items():
        for n, step in enumerate(steps):
            script = os.path.join(steps_dir, step.path)
            if not os.path.isfile(script):
                ctx.error((stages_key, stage, n, "path"), "step script %r does not exist" % step.path,
                          "create %s, or fix the path (it is relative to %s/)" % (script, LAYOUT[fmt][0]))
            elif not _within(os.path.realpath(script), real_root):
                ctx.error((stages_key, stage, n, "path"), "step script %r resolves outside the package (to %s)"
                          % (step.path, os.path.realpath(script)),
                          "put the script itself under %s/ instead of a link to it" % LAYOUT[fmt][0])


def _within(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def check_tree(root, files_dirname):
    """Problems of the entries of a package directory, as ``(relative path, message,
    hint)``: a symlink with an absolute target or one that resolves outside the package
    (outside ``files_dirname``, for what is laid onto the host: the host root is its
    bound there), or an entry that is neither a file, a directory nor a symlink. A
    package whose entries all pass cannot make the runner read or write anything
    outside the package or the host root."""
    problems = []
    real_root = os.path.realpath(root)
    files_root = os.path.join(real_root, files_dirname)
    for dirpath, dirnames, filenames in os.walk(real_root):
        dirnames.sort()
        for name in sorted(dirnames) + sorted(filenames):
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, real_root)
            bound = files_root if _within(path, files_root) else real_root
            if os.path.islink(path):
                target = os.readlink(path)
                inside = "the package" if bound == real_root else files_dirname + "/"
                if os.path.isabs(target):
                    problems.append((rel, "is a symlink to the absolute path %s" % target,
                                     "replace the link by the file itself, or by a relative link that stays "
                                     "inside %s" % inside))
                elif not _within(os.path.realpath(os.path.join(dirpath, target)), bound):
                    problems.append((rel, "is a symlink to %s, which resolves outside %s" % (target, inside),
                                     "replace the link by the file it points to"))
                continue
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                problems.append((rel, "is neither a file nor a directory (a device, FIFO or socket)",
                                 "remove it; a step creates such things on the host if it needs them"))
    return problems


def _check_entries(ctx, root, fmt):
    for rel, message, hint in check_tree(root, LAYOUT[fmt][1]):
        ctx.error((), "%s %s" % (rel, message), hint, field=rel)


def _parse_config_scripts(ctx, parts, value, stages):
    """``configScripts``: stage -> the config keys that may supply the script its steps
    run. A stage named here must have steps (they run the script)."""
    out = {}
    if not _check_type(ctx, parts, value, dict, "a mapping of stage to a list of config keys"):
        return out
    for stage, keys in value.items():
        if stage not in ALL_STAGES:
            ctx.error(parts + (stage,), "unknown stage %r" % stage, "one of %s" % ", ".join(ALL_STAGES))
            continue
        names = _string_list(ctx, parts + (stage,), keys)
        if not names:
            ctx.error(parts + (stage,), "stage %r lists no config keys" % stage, "e.g. [\"%s.sh\"]" % stage)
            continue
        for n, key in enumerate(names):
            if not CONFIG_KEY_RE.match(key):
                ctx.error(parts + (stage, n), "config key %r cannot be a file name" % key,
                          "use letters, digits, '-', '_' and '.'")
        if not stages.get(stage):
            ctx.error(parts + (stage,), "stage %r has no steps to run the script its config supplies" % stage,
                      "add a step to stages.%s that runs it, or remove %s from configScripts" % (stage, stage))
        out[stage] = names
    return out


def _from_native(data, root, source, lines):
    name = data.get("name") if isinstance(data, dict) else None
    ctx = _Context(name if isinstance(name, str) else None, source, lines)
    if not isinstance(data, dict):
        ctx.error((), "the manifest must be a mapping", "start from a shipped package's package.json")
        ctx.raise_if_errors()
    for key in sorted(set(data) - set(NATIVE_FIELDS)):
        ctx.error((key,), "unknown field %r" % key, "allowed: %s" % ", ".join(NATIVE_FIELDS))
    if "name" not in data:
        ctx.error((), "missing 'name'", "add a name matching %s" % NAME_RE.pattern)
    elif not isinstance(name, str) or not NAME_RE.match(name):
        ctx.error(("name",), "invalid package name %r" % (name,),
                  "2-43 characters of a-z, 0-9 and '-', starting and ending with a letter (%s)" % NAME_RE.pattern)
    version = data.get("version")
    if "version" not in data:
        ctx.error((), "missing 'version'", "add a semantic version such as 1.0.0")
    elif not is_version(version):
        ctx.error(("version",), "version %r is not a semantic version" % (version,),
                  "use MAJOR.MINOR.PATCH, e.g. 1.0.0 or 1.1.0-rc.1")
    description = data.get("description", "")
    _check_type(ctx, ("description",), description, str, "a string")
    stages = _parse_stages(ctx, ("stages",), data.get("stages", {}), FORMAT_NATIVE, "stage")
    interrupt = Interrupt()
    if "interrupt" in data:
        interrupt = parse_interrupt(ctx, ("interrupt",), data["interrupt"]) or Interrupt()
    config_interrupts = {}
    raw_ci = data.get("configInterrupts", {})
    if _check_type(ctx, ("configInterrupts",), raw_ci, dict, "a mapping of config key glob to interrupt"):
        for pattern, raw in raw_ci.items():
            parsed = parse_interrupt(ctx, ("configInterrupts", pattern), raw)
            if parsed is not None:
                config_interrupts[pattern] = parsed
    depends_on = _parse_depends_on(ctx, ("dependsOn",), data.get("dependsOn", {}), name)
    expected = _string_list(ctx, ("expectedConfig",), data.get("expectedConfig", []))
    for n, key in enumerate(expected):
        if not CONFIG_KEY_RE.match(key):
            ctx.error(("expectedConfig", n), "config key %r cannot be a file name" % key,
                      "use letters, digits, '-', '_' and '.'")
    default_config = data.get("defaultConfig", {})
    if _check_type(ctx, ("defaultConfig",), default_config, dict, "a mapping of config key to value"):
        for key in default_config:
            if not CONFIG_KEY_RE.match(key):
                ctx.error(("defaultConfig", key), "config key %r cannot be a file name" % key,
                          "use letters, digits, '-', '_' and '.'")
    else:
        default_config = {}
    config_scripts = _parse_config_scripts(ctx, ("configScripts",), data.get("configScripts", {}), stages)
    host_settings = _parse_host_settings(ctx, ("hostSettings",), data.get("hostSettings", {}))
    resolver = data.get("resolver")
    if resolver is not None and resolver not in RESOLVERS:
        ctx.error(("resolver",), "unknown resolver %r" % (resolver,),
                  "resolvers ship with the collection: %s" % ", ".join(RESOLVERS))
        resolver = None
    if root is not None:
        _check_scripts(ctx, root, FORMAT_NATIVE, stages, "stages")
        _check_entries(ctx, root, FORMAT_NATIVE)
    ctx.raise_if_errors()
    return Package(name, version, description=description, stages=stages, interrupt=interrupt,
                   config_interrupts=config_interrupts, depends_on=depends_on, expected_config=expected,
                   default_config=default_config, root=root, format=FORMAT_NATIVE, source=source,
                   config_scripts=config_scripts, host_settings=host_settings, resolver=resolver)


def _parse_host_settings(ctx, parts, value):
    out = {}
    if not _check_type(ctx, parts, value, dict, "a mapping of setting kind to \"*\" or {setting: config key}"):
        return out
    for kind, mapping in value.items():
        if kind not in HOST_SETTING_KINDS:
            ctx.error(parts + (kind,), "unknown host setting kind %r" % (kind,),
                      "one of %s" % ", ".join(HOST_SETTING_KINDS))
        elif mapping == "*":
            out[kind] = "*"
        elif isinstance(mapping, dict) and mapping and all(
                isinstance(k, str) and isinstance(v, str) and CONFIG_KEY_RE.match(v) for k, v in mapping.items()):
            out[kind] = dict(mapping)
        else:
            ctx.error(parts + (kind,), "must be \"*\" (every config key is a %s setting) or a non-empty mapping of "
                      "setting name to config key" % kind, "e.g. {\"crashkernel\": \"crashkernel\"}")
    return out


def _parse_depends_on(ctx, parts, value, own_name):
    deps = {}
    if not _check_type(ctx, parts, value, dict, "a mapping of package name to version"):
        return deps
    for dep, version in value.items():
        if not NAME_RE.match(dep):
            ctx.error(parts + (dep,), "invalid package name %r" % dep, "names match %s" % NAME_RE.pattern)
        elif dep == own_name:
            ctx.error(parts + (dep,), "a package cannot depend on itself", "remove this dependsOn entry")
        elif not is_version(version):
            ctx.error(parts + (dep,), "dependency version %r is not a semantic version" % (version,),
                      "use MAJOR.MINOR.PATCH")
        else:
            deps[dep] = version
    return deps


def _from_skyhook(data, root, source, lines):
    name = data.get("package_name") if isinstance(data, dict) else None
    ctx = _Context(name if isinstance(name, str) else None, source, lines)
    if not isinstance(data, dict):
        ctx.error((), "config.json must be a mapping", "see Skyhook's agent schema v1")
        ctx.raise_if_errors()
    if data.get("schema_version") != "v1":
        ctx.error(("schema_version",), "unsupported Skyhook schema_version %r" % (data.get("schema_version"),),
                  "NodeWright reads Skyhook agent schema v1")
    if not isinstance(name, str) or not SKYHOOK_NAME_RE.match(name):
        ctx.error(("package_name",), "invalid or missing package_name %r" % (name,),
                  "letters, digits, '-', '_' and '.'")
    version = data.get("package_version")
    if not is_version(version):
        ctx.error(("package_version",), "package_version %r is not a semantic version" % (version,),
                  "use MAJOR.MINOR.PATCH, e.g. 1.0.0")
    expected = _string_list(ctx, ("expected_config_files",), data.get("expected_config_files", []))
    stages = _parse_stages(ctx, ("modes",), data.get("modes", {}), FORMAT_SKYHOOK, "mode")
    if root is not None:
        _check_scripts(ctx, root, FORMAT_SKYHOOK, stages, "modes")
        _check_entries(ctx, root, FORMAT_SKYHOOK)
    ctx.raise_if_errors()
    return Package(name, version, stages=stages, expected_config=expected, root=root,
                   format=FORMAT_SKYHOOK, source=source)


def package_from_manifest(data, root=None, source=None, lines=None, fmt=FORMAT_NATIVE):
    """Validate parsed manifest data into a ``Package``. With ``root`` the step
    scripts must exist under it; ``lines`` maps field paths to manifest lines."""
    if fmt == FORMAT_SKYHOOK:
        return _from_skyhook(data, root, source, lines)
    return _from_native(data, root, source, lines)


def find_manifest(path):
    """(format, manifest path) of a package directory, or a ``PackageError``."""
    for fmt, name in ((FORMAT_NATIVE, MANIFEST_JSON), (FORMAT_NATIVE, MANIFEST_YAML),
                      (FORMAT_SKYHOOK, MANIFEST_SKYHOOK)):
        candidate = os.path.join(path, name)
        if os.path.isfile(candidate):
            return fmt, candidate
    if not os.path.isdir(path):
        hint = "give the path of a package directory"
        raise PackageError([ValidationError("package directory %s does not exist" % path, hint=hint)])
    raise PackageError([ValidationError(
        "%s holds no package manifest" % path,
        hint="a package directory has %s (NodeWright) or %s (Skyhook)" % (MANIFEST_JSON, MANIFEST_SKYHOOK))])


def load_package(path, config=None):
    """Load and validate the package in directory ``path``; with ``config``, also
    check it supplies every expected key. ``package.yaml`` needs PyYAML (the controller:
    ``manifest_yaml``); the package action sends a node ``package.json``."""
    fmt, manifest = find_manifest(path)
    if manifest.endswith(".yaml"):
        from ansible_collections.nodewright.fleet.plugins.module_utils.package import manifest_yaml
        if not manifest_yaml.available():
            raise PackageError([ValidationError(
                "%s is YAML, which this Python cannot read (no PyYAML)" % manifest, source=manifest,
                hint="run through the nodewright.fleet.package action (it converts YAML on the controller) "
                     "or ship package.json")])
        try:
            data, lines = manifest_yaml.read_manifest(manifest)
        except ValidationError as exc:
            raise PackageError([exc])
    else:
        text = safe_load.read_text(manifest)
        data, lines = parse_json_manifest(text, manifest)
    package = package_from_manifest(data, root=path, source=manifest, lines=lines, fmt=fmt)
    if config is not None:
        package.validate_config(config)
    return package
