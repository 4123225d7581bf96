"""Environment settings are validated with errors that name the variable."""

from __future__ import annotations

import pytest
from torch_emu.config import read_settings


def test_defaults():
    settings = read_settings({})
    assert settings.device_count == 2
    assert settings.cpu_fallback is False
    assert settings.plants == frozenset()


def test_values_are_parsed():
    settings = read_settings(
        {"EMU_DEVICE_COUNT": "4", "EMU_CPU_FALLBACK": "1", "EMU_PLANT": "wrong_grad, ignores_out"}
    )
    assert settings.device_count == 4
    assert settings.cpu_fallback is True
    assert settings.plants == {"wrong_grad", "ignores_out"}


@pytest.mark.parametrize("value", ["0", "17", "two", "-1"])
def test_bad_device_count(value):
    with pytest.raises(ValueError, match=f"EMU_DEVICE_COUNT='{value}'"):
        read_settings({"EMU_DEVICE_COUNT": value})


def test_bad_fallback_switch():
    with pytest.raises(ValueError, match="EMU_CPU_FALLBACK='yes': expected 0 or 1"):
        read_settings({"EMU_CPU_FALLBACK": "yes"})


def test_unknown_plants_are_named():
    with pytest.raises(ValueError, match="unknown planted bug\\(s\\) bogus, nope"):
        read_settings({"EMU_PLANT": "wrong_result,nope,bogus"})
