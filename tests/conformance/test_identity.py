"""Test identity: the parser on upstream names, and the structured path on real items."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from pathlib import Path

import pytest

from conformance.identity import identity_from_item, parse_nodeid
from conformance.model import TestIdentity

FIXTURE = Path(__file__).parent.parent / "fixtures" / "names" / "upstream_nodeids.json"
FIELDS = ("test_id", "test_class", "template", "op", "variant", "dtype", "params", "device")
DEVICES = ("emu", "privateuse1", "cpu")


def _fixture() -> dict:
    return json.loads(FIXTURE.read_text())


CASES = _fixture()["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["nodeid"] for c in CASES])
def test_parser_on_upstream_names(case: dict) -> None:
    identity = parse_nodeid(case["nodeid"], _fixture()["device_names"])
    got = {f: getattr(identity, f) for f in FIELDS}
    want = {f: case.get(f, "") for f in FIELDS}
    assert got == want
    assert identity.nodeid == case["nodeid"]
    assert identity.file == case["nodeid"].split("::")[0]


def test_same_upstream_test_on_every_device_has_one_test_id() -> None:
    by_name: dict[str, set[str]] = defaultdict(set)
    for case in CASES:
        identity = parse_nodeid(case["nodeid"], DEVICES)
        # Key by the name with devices spelled out the same way, so pairs are found
        # independently of the parser.
        key = case["nodeid"]
        for token in ("PRIVATEUSE1", "EMU", "CPU"):
            key = key.replace(f"{token}::", "::")
        for token in ("_emu", "_cpu"):
            key = key.replace(token, "_DEV")
        by_name[key].add(identity.test_id)
    pairs = [ids for ids in by_name.values()]
    assert all(len(ids) == 1 for ids in pairs)
    # The fixture holds tests seen under several devices/suffixes, or this proves nothing.
    groups = defaultdict(int)
    for case in CASES:
        groups[case["test_id"]] += 1
    assert sum(1 for n in groups.values() if n > 1) >= 8


def test_device_with_index_and_case_is_normalised() -> None:
    identity = parse_nodeid("test_ops.py::TestCommonEMU::test_out_add_emu_float32", ["EMU:0"])
    assert identity.test_id == "test_ops.py::TestCommon::test_out_add_float32"
    assert identity.device == "emu"


def test_class_suffix_is_kept_when_the_name_has_no_device_token() -> None:
    # test_cuda.py::TestCuda is not device-instantiated: nothing to strip.
    identity = parse_nodeid("test_foo.py::TestCPU::test_threads", DEVICES)
    assert identity.test_id == "test_foo.py::TestCPU::test_threads"
    assert identity.test_class == "TestCPU"
    assert identity.device == ""


def test_device_token_in_a_non_device_class_is_kept() -> None:
    # @parametrize("device", ["cpu"]) in a plain class names the test ..._device_cpu.
    identity = parse_nodeid("test_foo.py::TestFoo::test_bar_device_cpu", DEVICES)
    assert identity.test_id == "test_foo.py::TestFoo::test_bar_device_cpu"


def test_last_device_token_before_the_dtypes_is_the_device() -> None:
    identity = parse_nodeid(
        "test_torch.py::TestTorchDeviceTypeEMU::test_to_cpu_emu_float8_e4m3fnuz_float32", DEVICES
    )
    assert (
        identity.test_id
        == "test_torch.py::TestTorchDeviceType::test_to_cpu_float8_e4m3fnuz_float32"
    )
    assert identity.dtype == "float8_e4m3fnuz_float32"
    assert identity.device == "emu"


def test_function_nodeid_without_class() -> None:
    identity = parse_nodeid("test_misc.py::test_plain[1-2]", DEVICES)
    assert identity == TestIdentity(
        nodeid="test_misc.py::test_plain[1-2]",
        test_id="test_misc.py::test_plain[1-2]",
        file="test_misc.py",
        template="test_plain[1-2]",
    )


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="empty nodeid"):
        parse_nodeid("  ", DEVICES)
    with pytest.raises(TypeError, match="not a string"):
        parse_nodeid("test_ops.py::TestCommonEMU::test_out_add_emu_float32", "emu")


UPSTREAM_STYLE = """
import torch
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, parametrize

OPS = [op for op in op_db
       if op.full_name in ("add", "__rpow__", "linalg.norm.subgradients_at_zero",
                           "nn.functional.gelu")]


class TestSample(TestCase):
    @ops(OPS, allowed_dtypes=(torch.float32, torch.int64))
    def test_out(self, device, dtype, op):
        pass

    @dtypes(torch.float16, torch.int64)
    def test_plain(self, device, dtype):
        pass

    @dtypes((torch.int32, torch.float64))
    def test_pair(self, device, dtypes):
        pass

    def test_storage(self, device):
        pass

    @parametrize("reduction", ["mean", "sum"])
    def test_loss(self, device, reduction):
        pass

    @modules([m for m in module_db if m.name in ("nn.Linear", "nn.BatchNorm2d")],
             allowed_dtypes=(torch.float32,))
    def test_forward(self, device, dtype, module_info, training):
        pass


instantiate_device_type_tests(TestSample, globals(), only_for="cpu")
"""


def _collect(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> list:
    # Keep the inner session to pytest's own plugins: this is about torch's test objects.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    path = pytester.makepyfile(test_upstream_sample=UPSTREAM_STYLE)
    items, _ = pytester.inline_genitems(path)
    return items


def test_identity_from_real_instantiated_items(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = _collect(pytester, monkeypatch)
    got = {item.nodeid.split("::")[-1]: identity_from_item(item, ["cpu"]) for item in items}
    file = "test_upstream_sample.py"

    out = got["test_out_linalg_norm_subgradients_at_zero_cpu_float32"]
    assert out.test_id == f"{file}::TestSample::test_out_linalg_norm_subgradients_at_zero_float32"
    assert (out.test_class, out.template, out.op, out.variant, out.dtype, out.device) == (
        "TestSample",
        "test_out",
        "linalg.norm.subgradients_at_zero",
        "subgradients_at_zero",
        "float32",
        "cpu",
    )
    rpow = got["test_out___rpow___cpu_int64"]
    assert (rpow.template, rpow.op, rpow.variant, rpow.dtype) == (
        "test_out",
        "__rpow__",
        "",
        "int64",
    )

    assert got["test_plain_cpu_float16"].template == "test_plain"
    assert got["test_plain_cpu_float16"].dtype == "float16"
    pair = got["test_pair_cpu_int32_float64"]
    assert (pair.dtype, pair.test_id) == (
        "int32_float64",
        f"{file}::TestSample::test_pair_int32_float64",
    )
    storage = got["test_storage_cpu"]
    assert (storage.test_id, storage.template, storage.dtype, storage.params) == (
        f"{file}::TestSample::test_storage",
        "test_storage",
        "",
        "",
    )

    # @parametrize: the structured path knows the template and the parameter, where the
    # name alone cannot tell "mean" the parameter from "mean" the op.
    loss = got["test_loss_reduction_mean_cpu"]
    assert (loss.template, loss.op, loss.params) == ("test_loss", "", "reduction=mean")
    assert loss.test_id == f"{file}::TestSample::test_loss_reduction_mean"

    batchnorm = got["test_forward_nn_BatchNorm2d_eval_mode_cpu_float32"]
    assert (batchnorm.template, batchnorm.op, batchnorm.params, batchnorm.dtype) == (
        "test_forward",
        "nn.BatchNorm2d",
        "training=False",
        "float32",
    )
    # nn.Linear behaves the same in both modes: torch names no mode, so there is no param.
    linear = got["test_forward_nn_Linear_cpu_float32"]
    assert (linear.template, linear.op, linear.params) == ("test_forward", "nn.Linear", "")


def test_item_and_parser_agree_on_ops_and_dtypes_tests(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = _collect(pytester, monkeypatch)
    assert len(items) >= 15
    for item in items:
        structured = identity_from_item(item, ["cpu"])
        parsed = parse_nodeid(item.nodeid, ["cpu"])
        assert structured.test_id == parsed.test_id, item.nodeid
        assert structured.dtype == parsed.dtype, item.nodeid
        assert structured.device == parsed.device == "cpu", item.nodeid
        if "_loss_" not in item.nodeid:
            fields = ("template", "op", "variant", "params", "test_class")
            assert [getattr(structured, f) for f in fields] == [
                getattr(parsed, f) for f in fields
            ], item.nodeid


def test_identity_from_item_is_fast(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = _collect(pytester, monkeypatch)
    calls = 0
    start = time.perf_counter()
    while calls < 3000:
        for item in items:
            identity_from_item(item, DEVICES)
            calls += 1
    per_call = (time.perf_counter() - start) / calls
    # ~150,000 items per upstream run: a millisecond each would already be 2.5 minutes.
    assert per_call < 200e-6, f"{per_call * 1e6:.0f} us per item"


PARAMETRIZED_ONLY = """
import torch
from torch.testing._internal.common_utils import TestCase, instantiate_parametrized_tests, parametrize


@instantiate_parametrized_tests
class TestPlain(TestCase):
    @parametrize("dtype", [torch.float32, torch.int64])
    @parametrize("reduction", ["mean", "sum"])
    def test_reduce(self, dtype, reduction):
        pass

    def test_unparametrized(self):
        pass
"""


def test_identity_from_items_parametrized_without_device(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    items, _ = pytester.inline_genitems(pytester.makepyfile(test_plain_sample=PARAMETRIZED_ONLY))
    got = {item.nodeid.split("::")[-1]: identity_from_item(item, DEVICES) for item in items}
    assert sorted(got) == [
        "test_reduce_float32_reduction_mean",
        "test_reduce_float32_reduction_sum",
        "test_reduce_int64_reduction_mean",
        "test_reduce_int64_reduction_sum",
        "test_unparametrized",
    ]
    reduce = got["test_reduce_int64_reduction_sum"]
    assert reduce == TestIdentity(
        nodeid="test_plain_sample.py::TestPlain::test_reduce_int64_reduction_sum",
        test_id="test_plain_sample.py::TestPlain::test_reduce_int64_reduction_sum",
        file="test_plain_sample.py",
        test_class="TestPlain",
        template="test_reduce",
        dtype="int64",
        params="reduction=sum",
    )
    plain = got["test_unparametrized"]
    assert (plain.test_id, plain.template, plain.device) == (
        "test_plain_sample.py::TestPlain::test_unparametrized",
        "test_unparametrized",
        "",
    )


class _PlainItem:
    """A collected item that is not a torch test (a pytest function, a doctest)."""

    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid
        self.cls = None
        self.obj = lambda: None


def test_items_without_torch_structure_use_the_parser() -> None:
    identity = identity_from_item(
        _PlainItem("test_ops.py::TestCommonEMU::test_out_add_emu_float32"), DEVICES
    )
    assert identity == parse_nodeid("test_ops.py::TestCommonEMU::test_out_add_emu_float32", DEVICES)


def test_embedded_suite_files_are_named_from_the_suite_folder_whatever_the_rootdir() -> None:
    from conformance.embedded import SUITE_DIR

    repo = SUITE_DIR.parent.parent  # an editable install: pytest's rootdir is the repository
    nodeid = "conformance/embedded/test_ops.py::TestCommonCPU::test_out_sin_cpu_float32"
    identity = parse_nodeid(nodeid, DEVICES, rootdir=repo)
    assert identity.test_id == "embedded/test_ops.py::TestCommon::test_out_sin_float32"
    assert identity.file == "embedded/test_ops.py" and identity.nodeid == nodeid
    assert identity.suite == "embedded"
    # Run from the suite folder, and files outside it, are named as pytest names them.
    assert (
        parse_nodeid(
            "test_ops.py::TestCommonCPU::test_out_sin_cpu_float32", DEVICES, rootdir=SUITE_DIR
        ).test_id
        == identity.test_id
    )
    other = parse_nodeid(
        "test/test_ops.py::TestCommonCPU::test_out_sin_cpu_float32", DEVICES, rootdir=repo
    )
    assert other.test_id == "test/test_ops.py::TestCommon::test_out_sin_float32"
    assert other.suite == "upstream"
    # Upstream's test_ops.py, run from its test/ folder: same file, class and name as the
    # embedded test, yet another test, so never the same identity.
    upstream = parse_nodeid(
        "test_ops.py::TestCommonCPU::test_out_sin_cpu_float32", DEVICES, rootdir=repo / "test"
    )
    assert upstream.test_id == "test_ops.py::TestCommon::test_out_sin_float32"
    assert upstream.test_id != identity.test_id and upstream.suite == "upstream"


def test_items_of_the_embedded_suite_collected_from_elsewhere_keep_their_test_ids(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conformance.embedded import SELECTION_ENV, SUITE_DIR

    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv(SELECTION_ENV, "smoke")
    monkeypatch.setenv("PYTORCH_TESTING_DEVICE_ONLY_FOR", "cpu")
    items, _ = pytester.inline_genitems(str(SUITE_DIR / "test_optim.py"))
    assert items
    for item in items:
        identity = identity_from_item(item, DEVICES)
        assert identity.file == "embedded/test_optim.py", item.nodeid
        assert identity.test_id.startswith("embedded/test_optim.py::TestOptimRenewed::"), (
            item.nodeid
        )
        assert identity.suite == "embedded"
