"""``conformance suite``: template parsing, the counts table, and bad input."""

from __future__ import annotations

from collections import Counter

import pytest

from conformance.cli import main
from conformance.embedded import SELECTION_ENV, SUITE_DIR
from conformance.embedded.cli import count_by_template, format_counts, template_of


@pytest.mark.parametrize(
    ("nodeid", "expected"),
    [
        ("test_ops.py::TestCommonCPU::test_out_abs_cpu_float32", ("test_ops.py", "test_out")),
        (
            "test_ops.py::TestCommonPRIVATEUSE1::test_out_warning_sin_emu_float32",
            ("test_ops.py", "test_out_warning"),
        ),
        (
            "conformance/embedded/test_ops_gradients.py::TestFwdGradientsEMU::test_forward_mode_AD_exp_emu_float64",
            ("test_ops_gradients.py", "test_forward_mode_AD"),
        ),
        (
            "test_modules.py::TestModuleCPU::test_forward_nn_Linear_cpu_float32",
            ("test_modules.py", "test_forward"),
        ),
        ("test_ops.py::TestCommonCPU::test_dtypes_exp_cpu", ("test_ops.py", "test_dtypes")),
        ("test_ops.py::TestCommonCPU::test_something_else_cpu", ("test_ops.py", "")),
    ],
)
def test_template_of_real_names(nodeid, expected):
    assert template_of(nodeid) == expected


def test_counts_table_adds_up():
    emu = count_by_template(
        [
            "test_ops.py::TestCommonEMU::test_out_sin_emu_float32",
            "test_ops.py::TestCommonEMU::test_out_cos_emu_float32",
            "test_optim.py::TestOptimRenewedEMU::test_step_matches_cpu_SGD_emu_float32",
        ]
    )
    cpu = Counter({("test_ops.py", "test_out"): 5})
    table = format_counts({"emu": emu, "cpu": cpu}).splitlines()
    assert table[0].split() == ["template", "emu", "cpu"]
    assert table[1].split() == ["test_ops.py::test_out", "2", "5"]
    assert table[2].split() == ["test_optim.py::test_step_matches_cpu", "1", "0"]
    assert table[-1].split() == ["total", "3", "5"]


def test_suite_path(capsys):
    assert main(["suite", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(SUITE_DIR)


def test_bad_device_exits_2(capsys):
    assert main(["suite", "counts", "--device", "emu; rm"]) == 2
    assert "--device" in capsys.readouterr().err


def test_bad_selection_in_the_environment_exits_2(monkeypatch, capsys):
    monkeypatch.setenv(SELECTION_ENV, "everything")
    assert main(["suite", "time", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert SELECTION_ENV in err and "smoke, core, full" in err


def test_bad_worker_count_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["suite", "time", "-n", "two"])
    assert info.value.code == 2
