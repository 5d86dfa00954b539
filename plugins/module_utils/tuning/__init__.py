# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""Intent-based NVIDIA host tuning: profile resolution, the files it writes, diffs,
read-back checks and the nvidia-tuning package's config. Pure and stdlib only but
``shipped``: the profile layers come in as plain dicts (``shipped`` reads the ones that
ship with the collection, on the controller, and renders the role's templates); the
accelerator comes from ``node/gpu.py``.

- ``vocabulary``: mechanisms, options, GPU settings, host paths;
- ``detect``: the node's cloud and operating system;
- ``interrupts``: what a change needs (reboot, service restarts, nothing);
- ``layers``: layer names and kinds, inheritance, settings normalised;
- ``resolve``: the layers for one node merged, constrained and checked;
- ``files``: what a resolved profile writes on the host;
- ``diff``: what changed since the host's record, and the record itself;
- ``checks``: what to read back and the verdict's result;
- ``package``: the nvidia-tuning package's config, resolved on the controller;
- ``shipped``: the collection's profiles, templates and package, read on the controller.

A *layer* is a mapping::

    description: text
    inherits: [platforms/grace]          # other layers, applied first
    meta: {family: blackwell, arch: arm64, ...}
    settings:
      sysctl:   {vm.swappiness: {value: 1, why: ...}}
      cmdline:  {init_on_alloc: {value: init_on_alloc=0, why: ...}}
      module:   {ib_umad: {why: ...}}
      modprobe: {nvidia: {NVreg_CoherentGPUMemoryMode: {value: driver, why: ...}}}
      dropin:   {containerd.service: {LimitMEMLOCK: {value: infinity, why: ...}}}
      governor: {cpu: {value: performance, why: ...}}
      gpu:      {persistence: {value: enabled, why: ...}}
    remove: {"cmdline:hugepages_1G": why}   # explicit removal, the only way to drop
    constraints: {...}                      # os/ and clouds/ layers only
    activate: {option: value}               # options/ layers only
    requires: {arch: [...], reason: ...}    # options/ layers only

Layers merge setting by setting (``<mechanism>:<key>``): a later layer overrides a
value, never a whole group, so an intent cannot lose its parent's 1G huge pages by
redefining a neighbouring setting. Order: ``base``, the accelerator's chain
(platforms first), the intent's chain, the OS, the cloud, the active options, and
the caller's ``extra`` layer.

Interrupts use the package vocabulary ``{type: reboot|restartAllServices|service|
noop, services: [...]}``; only a changed kernel command line or a changed option of
a driver that loads at boot asks for a reboot.
"""
