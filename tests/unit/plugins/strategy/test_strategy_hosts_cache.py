# -*- coding: utf-8 -*-
# Copyright: NodeWright maintainers
# Apache License 2.0 (see LICENSE)
"""The rollout strategy's lists of the play's host names. Every task of every host copies
the list of all of them (``ansible_play_hosts_all``), taking a reference to each name; with
forked workers sharing the controller's pages, each page that copy writes to is copied again
after every fork. The strategy keeps its own copies of the names, packed into few pages, so
that this cost stays a few dozen pages instead of one page per host of the fleet."""

from __future__ import annotations

import pytest

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader

from ansible_collections.nodewright.fleet.plugins.strategy.rollout import StrategyModule

pytestmark = pytest.mark.unit

PAGE = 4096


class _Play:
    hosts = "all"
    order = None
    finalized = True


def _inventory(count):
    """An inventory of ``count`` hosts whose names lie far apart, as an inventory plugin
    that reads a cluster leaves them: each among the strings of its node (its labels), of
    the same size, which the allocator puts in the same pages."""
    inventory = InventoryManager(loader=DataLoader(), sources=[])
    keep = []
    for i in range(count):
        inventory.add_host("node-%05d.gpu.example.com" % i, group="all")
        keep.append(["label-%05d-%02d.example.com" % (i, j) for j in range(20)])
    return inventory, keep


def _strategy(inventory):
    strategy = StrategyModule.__new__(StrategyModule)  # no task queue manager
    strategy._inventory = inventory
    strategy._hosts_cache = []
    strategy._hosts_cache_all = []
    strategy._nw_names = {}
    return strategy


def _pages(objects):
    return len({id(o) // PAGE for o in objects})


def test_the_host_name_lists_are_packed_copies_of_the_names():
    inventory, _keep = _inventory(2000)
    strategy = _strategy(inventory)
    strategy._set_hosts_cache(_Play())
    names = [h.name for h in inventory.get_hosts("all")]
    assert strategy._hosts_cache_all == names and strategy._hosts_cache == names
    by_name = {h.name: h.name for h in inventory.get_hosts("all")}
    assert not any(copy is by_name[copy] for copy in strategy._hosts_cache_all)
    assert all(type(copy) is str for copy in strategy._hosts_cache_all)
    # The inventory's names lie on about one page for two; the copies fill their pages.
    assert _pages(names) > 500
    assert _pages(strategy._hosts_cache_all) < _pages(names) / 5


def test_lists_kept_by_a_refresh_false_call_are_not_copied_again():
    inventory, _keep = _inventory(50)
    strategy = _strategy(inventory)
    strategy._set_hosts_cache(_Play())
    kept, kept_all = strategy._hosts_cache, strategy._hosts_cache_all
    strategy._set_hosts_cache(_Play(), refresh=False)
    assert strategy._hosts_cache is kept and strategy._hosts_cache_all is kept_all
    strategy._set_hosts_cache(_Play())  # a refresh builds new lists, of the same copies
    assert strategy._hosts_cache is not kept and strategy._hosts_cache == kept
    assert all(a is b for a, b in zip(strategy._hosts_cache_all, kept_all))


def test_each_name_is_copied_once_for_all_the_waves():
    inventory, _keep = _inventory(200)
    hosts = inventory.get_hosts("all")
    strategy = _strategy(inventory)
    strategy._set_hosts_cache(_Play())
    first = list(strategy._hosts_cache_all)
    for start in range(0, 200, 50):  # each wave restricts the inventory and refreshes the lists
        inventory.restrict_to_hosts(hosts[start:start + 50])
        strategy._set_hosts_cache(_Play())
        assert strategy._hosts_cache == [h.name for h in hosts[start:start + 50]]
        assert all(a is b for a, b in zip(strategy._hosts_cache_all, first))
        assert all(a is first[start + i] for i, a in enumerate(strategy._hosts_cache))
    assert len(strategy._nw_names) == 200


def test_a_restricted_inventory_gives_the_wave_and_the_whole_play():
    inventory, _keep = _inventory(30)
    hosts = inventory.get_hosts("all")
    inventory.restrict_to_hosts(hosts[:5])
    strategy = _strategy(inventory)
    strategy._set_hosts_cache(_Play())
    assert strategy._hosts_cache == [h.name for h in hosts[:5]]
    assert strategy._hosts_cache_all == [h.name for h in hosts]
