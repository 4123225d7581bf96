from __future__ import annotations

import pytest

from conformance.errors import ConfigError
from op_coverage.names import normalize_overload, packet_of


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("aten::add.Tensor", "aten::add.Tensor"),
        ("aten.add.Tensor", "aten::add.Tensor"),
        ("aten::dot.default", "aten::dot"),
        ("aten.dot.default", "aten::dot"),
        ("aten::dot", "aten::dot"),
        (" aten::random_.from ", "aten::random_.from"),
    ],
)
def test_every_spelling_maps_to_the_dispatcher_spelling(text, expected):
    assert normalize_overload(text) == expected


@pytest.mark.parametrize("text", ["", "add", "aten::", "aten::add.Tensor.x", "Could not run"])
def test_non_names_are_refused_with_where(text):
    with pytest.raises(ConfigError, match=r"skiplists/emu\.toml:3"):
        normalize_overload(text, where="skiplists/emu.toml:3")


def test_packet_drops_the_overload():
    assert packet_of("aten::add.Tensor") == "aten::add"
    assert packet_of("aten::dot") == "aten::dot"
