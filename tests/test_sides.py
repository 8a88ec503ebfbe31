"""Base and branch as one record (overrides/sides.py): read by attribute, in base-then-branch
order, and written to JSON under the keys files always had."""

import pytest

from overrides.sides import ROLES, Sides


def test_two_sides_are_read_by_attribute_in_order_and_keep_their_json_keys():
    sides = Sides.of(["/a/python", "/b/python"])
    base, branch = sides
    assert (base, branch) == (sides.base, sides.branch) == ("/a/python", "/b/python")
    assert sides.roles() == (("base", "/a/python"), ("branch", "/b/python")) and ROLES == ("base", "branch")
    assert sides.side("branch") == "/b/python" and sides.map(len) == Sides(9, 9)
    assert sides.with_side("base", "/c/python") == Sides("/c/python", "/b/python") and sides.base == "/a/python"
    assert sides.to_dict() == {"base": "/a/python", "branch": "/b/python"}
    assert Sides.from_dict(sides.to_dict(len), str) == Sides("9", "9")
    assert Sides.from_dict({"base": 1}) == Sides(1, None)
    with pytest.raises(ValueError, match="a side is base or branch, not 'plain'"):
        sides.side("plain")
