import pytest

from ansible_collections.nodewright.fleet.plugins.module_utils.common.errors import SelectorError
from ansible_collections.nodewright.fleet.plugins.module_utils.k8s.selectors import (
    from_label_selector,
    parse_label_selector,
    to_selector,
)

pytestmark = pytest.mark.unit

LABELS = {"nvidia.com/gpu.family": "hopper", "pool": "h100", "zone": "a"}


@pytest.mark.parametrize("text,expected", [
    ("", True),
    ("pool=h100", True),
    ("pool==h100", True),
    ("pool!=h100", False),
    ("pool!=b200", True),
    ("missing!=x", True),
    ("pool", True),
    ("!pool", False),
    ("!missing", True),
    ("nvidia.com/gpu.family in (hopper, blackwell)", True),
    ("nvidia.com/gpu.family notin (hopper)", False),
    ("missing notin (x)", True),
    ("missing in (x)", False),
    ("pool=h100,zone=b", False),
    ("pool=h100, zone in (a,b), !nodewright.io/ignore", True),
])
def test_string_selectors(text, expected):
    assert parse_label_selector(text).matches(LABELS) is expected


@pytest.mark.parametrize("text", [
    "pool=", "pool in ()", "pool in (a", "pool in a", "=x", "pool=a,", "pool ~ a",
    "bad key=1", "pool=a b", "-bad=1", "!",
])
def test_bad_selectors_raise(text):
    if text == "pool=":
        assert parse_label_selector(text).matches({"pool": ""})
        return
    with pytest.raises(SelectorError):
        parse_label_selector(text)


def test_label_selector_mapping_matches_string_form():
    mapping = {"matchLabels": {"pool": "h100"},
               "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                                    {"key": "nodewright.io/ignore", "operator": "DoesNotExist"}]}
    sel = from_label_selector(mapping)
    assert sel == parse_label_selector("pool=h100,zone in (a,b),!nodewright.io/ignore")
    assert sel.matches(LABELS)
    assert parse_label_selector(sel.to_string()) == sel


@pytest.mark.parametrize("mapping", [
    {"matchExpressions": [{"key": "a", "operator": "Bogus"}]},
    {"matchExpressions": [{"key": "a", "operator": "In"}]},
    {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
    {"matchLabelz": {}},
])
def test_bad_mappings_raise(mapping):
    with pytest.raises(SelectorError):
        from_label_selector(mapping)


def test_to_selector_combines_lists():
    sel = to_selector(["pool=h100", {"matchLabels": {"zone": "a"}}])
    assert sel.matches(LABELS)
    assert not sel.matches({"pool": "h100"})
