"""The harness's upstream behaviour on PyTorch's own test files, not on look-alikes.

The other tests of identity, classification, sharding, resume and repro run on fixture
files written in upstream's style (tests/fixtures/upstream). These run the same behaviour
on the real files of torch 2.13's test/ folder (``../shared/upstream/test``, copied into a
temporary folder first), with the plugin in pytest subprocesses, as a user would. Most
runs skip every test with a skiplist (``SKIP_ALL``): their records then hold each
collected test's identity at the cost of collection alone.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import main
from conformance.identity import parse_nodeid
from conformance.store import read_run
from skiplists.runs import plugin_args
from tests.conformance.test_repro import _run_script

pytestmark = pytest.mark.slow  # every test runs pytest on upstream files in a subprocess


def upstream_tests() -> Path:
    """PyTorch's test/ folder beside the repository, or a skip that says where it was sought."""
    folder = Path(__file__).resolve().parents[3] / "shared" / "upstream" / "test"
    if not (folder / "test_ops.py").is_file():
        pytest.skip(f"PyTorch's upstream test files are not at {folder} (no test_ops.py there)")
    return folder


def needs_emu() -> None:
    # Checked without importing: an import here would fix emu's plants for this process.
    if importlib.util.find_spec("torch_emu") is None:
        pytest.skip("the emu backend is not installed")


#: Skips every test of an upstream run, so that the run records identities only.
SKIP_ALL = """
[[skip]]
pattern = 'test_.+'
tier = "skip"
category = "not_applicable"
reason = "identity only: the test is recorded, not run"
"""

#: Four small files of plain device-generic tests and one @ops file (torch's OpInfo
#: gradcheck templates); -k keeps one @ops template, test_fn_grad (about 1,100 of the
#: file's 5,400 tests), and every test of the other files.
IDENTITY_FILES = (
    "test_scatter_gather_ops.py",
    "test_shape_ops.py",
    "test_view_ops.py",
    "test_sort_and_select.py",
    "test_ops_gradients.py",
)
IDENTITY_FILTER = "test_fn_grad_ or not test_ops_gradients"
OPS_FILE = "test_ops_gradients.py"

#: Tests upstream's device rules give the CPU alone (@dtypesIfCPU adds bfloat16).
CPU_ONLY = {
    "test_sort_and_select.py::TestSortAndSelect::test_unique_bfloat16",
    "test_sort_and_select.py::TestSortAndSelect::test_unique_consecutive_bfloat16",
}

#: How each device's instantiated classes end (emu's first class in a process reads
#: PRIVATEUSE1, the later ones EMU).
CLASS_SUFFIXES = {"cpu": ("CPU",), "emu": ("PRIVATEUSE1", "EMU")}

FIELDS = ("file", "test_class", "template", "op", "variant", "dtype", "params")


def _environ(**extra: str) -> dict[str, str]:
    """This process's environment without emu's settings, plus ``extra``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("EMU_")}
    return environ | extra


def run_pytest(
    folder: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """pytest with the conformance plugin on upstream files in ``folder``, serially."""
    command = [sys.executable, "-m", "pytest", *args, "-q", "-p", "no:cacheprovider"]
    command += [f"--rootdir={folder}", "--progress-interval", "0", *plugin_args()]
    return subprocess.run(
        command, cwd=folder, env=env or _environ(), capture_output=True, text=True, timeout=900
    )


def tail(done: subprocess.CompletedProcess) -> str:
    return (done.stdout[-3000:] + done.stderr[-3000:]).strip()


_COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)\b")


def pytest_counts(output: str) -> dict[str, int]:
    """The counts of pytest's own summary line ("571 skipped, 11 xfailed in 9.1s")."""
    lines = [line for line in output.splitlines() if _COUNT.search(line) and " in " in line]
    assert lines, output[-2000:]
    return {word.rstrip("s") if word.startswith("error") else word: int(n)
            for n, word in _COUNT.findall(lines[-1])}  # fmt: skip


def ran(counts: dict[str, int]) -> int:
    """Tests pytest ran (or skipped): every count but the deselected."""
    return sum(n for word, n in counts.items() if word != "deselected")


def expected_test_id(nodeid: str, device: str) -> str:
    """The test_id from a nodeid, the way the design defines it: the device's class suffix
    and the device token of the name (the last one, which only dtypes follow) removed."""
    file, cls, name = nodeid.split("::")
    for suffix in CLASS_SUFFIXES[device]:
        if cls.endswith(suffix):
            head, token, rest = name.rpartition(f"_{device}")
            assert token and (not rest or rest.startswith("_")), nodeid
            return f"{file}::{cls.removesuffix(suffix)}::{head}{rest}"
    return nodeid  # a class torch does not instantiate per device


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of PyTorch's test files (the originals are read-only and shared)."""
    source = upstream_tests()
    folder = tmp_path_factory.mktemp("upstream") / "test"
    folder.mkdir()
    for path in source.glob("*.py"):
        shutil.copy(path, folder)
    return folder


@pytest.fixture(scope="module")
def skip_all(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("skiplist") / "skip_all.toml"
    path.write_text(SKIP_ALL)
    return path


@dataclass
class Recorded:
    meta: Any
    frame: Any
    counts: dict[str, int]  # pytest's own summary of the session


@pytest.fixture(scope="module")
def identity_runs(
    upstream: Path, skip_all: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Recorded]:
    """The identity files run on cpu and on emu, every test skipped: what each records."""
    needs_emu()
    runs = tmp_path_factory.mktemp("identity")
    recorded = {}
    for device in ("cpu", "emu"):
        done = run_pytest(
            upstream, *IDENTITY_FILES, "-k", IDENTITY_FILTER, "--device", device,
            "--run-dir", str(runs / device), "--skiplist", str(skip_all),
        )  # fmt: skip
        assert done.returncode in (0, 1), tail(done)  # 1: a strict xfail of torch's list passed
        meta, frame = read_run(runs / device)
        recorded[device] = Recorded(meta, frame, pytest_counts(done.stdout))
    return recorded


# -- identity -------------------------------------------------------------------------------


def test_every_collected_upstream_test_is_recorded_under_a_device_independent_test_id(
    identity_runs: dict[str, Recorded],
):
    for device, run in identity_runs.items():
        frame = run.frame
        assert run.meta.complete, device
        # pytest's own count of what it ran, the plugin's count, and the records agree
        assert ran(run.counts) == run.meta.collected == len(frame) > 1500, (device, run.counts)
        assert run.counts["deselected"] > 4000  # -k left out test_ops_gradients' other templates
        assert sorted(set(frame["file"])) == sorted(IDENTITY_FILES), device
        assert frame["test_id"].is_unique and (frame["test_id"] != "").all(), device
        assert set(frame["device"]) == {device}
        wrong = [
            (nodeid, test_id)
            for nodeid, test_id in zip(frame["nodeid"], frame["test_id"], strict=True)
            if test_id != expected_test_id(nodeid, device)
        ]
        assert not wrong, (device, len(wrong), wrong[:5])
    # Both spellings of emu's classes occur in one real session, and both are removed.
    emu_nodeids = identity_runs["emu"].frame["nodeid"]
    assert emu_nodeids.str.contains("PRIVATEUSE1::").any()
    assert emu_nodeids.str.contains("EMU::").any()


def test_cpu_and_emu_name_the_same_upstream_tests_alike(identity_runs: dict[str, Recorded]):
    cpu = identity_runs["cpu"].frame.set_index("test_id")
    emu = identity_runs["emu"].frame.set_index("test_id")
    # The same tests on both devices, but for those upstream's device rules give one only.
    assert set(cpu.index) - set(emu.index) == CPU_ONLY
    assert set(emu.index) - set(cpu.index) == set()
    shared = sorted(set(cpu.index) & set(emu.index))
    differ = [
        test_id
        for test_id in shared
        if [cpu.at[test_id, f] for f in FIELDS] != [emu.at[test_id, f] for f in FIELDS]
    ]
    assert not differ, differ[:5]
    # Only the one plain TestCase of these files (not instantiated per device) has the
    # same nodeid on both devices.
    same = [t for t in shared if cpu.at[t, "nodeid"] == emu.at[t, "nodeid"]]
    assert same == ["test_view_ops.py::TestOldViewOps::test_conj_neg_view_numpy_error"]
    # A test whose own name ends in "cpu": only the device's token goes.
    name = "test_sort_and_select.py::TestSortAndSelect::test_complex_unsupported_cpu"
    assert cpu.at[name, "nodeid"].endswith("::test_complex_unsupported_cpu_cpu")
    assert emu.at[name, "nodeid"].endswith("::test_complex_unsupported_cpu_emu")


def test_ops_tests_carry_their_template_op_and_dtype(identity_runs: dict[str, Recorded]):
    for device, run in identity_runs.items():
        frame = run.frame
        ops = frame[frame["file"] == OPS_FILE]
        assert len(ops) > 1000, device
        assert set(ops["test_class"]) == {"TestBwdGradients"}
        assert set(ops["template"]) == {"test_fn_grad"}
        assert set(ops["dtype"]) == {"float64", "complex128"}  # gradcheck's dtypes
        assert (ops["op"] != "").all() and ops["op"].nunique() > 500, device
        # upstream names an @ops test template_{op with "." as "_"}_{device}_{dtype}
        for test_id, op, variant, dtype in zip(
            ops["test_id"], ops["op"], ops["variant"], ops["dtype"], strict=True
        ):
            name = f"test_fn_grad_{op.replace('.', '_')}_{dtype}"
            assert test_id == f"{OPS_FILE}::TestBwdGradients::{name}", (device, test_id, op)
            assert not variant or op.endswith(f".{variant}"), (device, op, variant)
        by_id = ops.set_index("test_id")
        norm = by_id.loc[
            f"{OPS_FILE}::TestBwdGradients::test_fn_grad_linalg_norm_subgradients_at_zero_float64"
        ]
        assert (norm["op"], norm["variant"]) == (
            "linalg.norm.subgradients_at_zero",
            "subgradients_at_zero",
        )
        rsub = by_id.loc[f"{OPS_FILE}::TestBwdGradients::test_fn_grad___rsub___complex128"]
        assert (rsub["op"], rsub["variant"], rsub["dtype"]) == ("__rsub__", "", "complex128")

        # The plain tests have no op; @parametrize arguments are params, not part of the
        # template, and the dtype is the dtype.
        plain = frame[frame["file"] != OPS_FILE]
        assert (plain["op"] == "").all() and (plain["template"] != "").all(), device
        gather = plain.set_index("test_id").loc[
            "test_scatter_gather_ops.py::TestScatterGather::"
            "test_gather_backward_with_empty_index_tensor_sparse_grad_False_float32"
        ]
        assert (gather["template"], gather["params"], gather["dtype"]) == (
            "test_gather_backward_with_empty_index_tensor",
            "sparse_grad=False",
            "float32",
        )


def test_the_name_parser_finds_the_test_ids_of_real_tests(identity_runs: dict[str, Recorded]):
    # parse_nodeid names what no worker reported (a crash) and what the skiplist tools collect
    for device, run in identity_runs.items():
        wrong = [
            (nodeid, parse_nodeid(nodeid, [device]).test_id)
            for nodeid, test_id in zip(run.frame["nodeid"], run.frame["test_id"], strict=True)
            if parse_nodeid(nodeid, [device]).test_id != test_id
        ]
        assert not wrong, (device, wrong[:5])


@pytest.mark.xfail(
    strict=True,
    reason="product bug: parse_nodeid reads plain tests whose names end in an OpInfo name as "
    "@ops tests (test_view_ops.py test_T_view_emu: template test_T, op view; 197 such tests "
    "here) and misses @ops tests of torch's other OpInfo lists (test_fn_grad_"
    "NumpyCatCustomOp_emu_float64: op '', 23 tests), so a crashed test's record and "
    "collect_identities disagree with the run's records on template and op",
)
def test_the_name_parser_agrees_with_the_collected_tests_on_template_and_op(
    identity_runs: dict[str, Recorded],
):
    for device, run in identity_runs.items():
        wrong = []
        for record in run.frame.to_dict("records"):
            if record["params"]:  # @parametrize values: only the test object knows them
                continue
            parsed = parse_nodeid(record["nodeid"], [device])
            fields = ("template", "op", "variant", "dtype")
            if [getattr(parsed, f) for f in fields] != [record[f] for f in fields]:
                wrong.append(record["nodeid"])
        assert not wrong, (device, len(wrong), wrong[:5])


# -- sharding -------------------------------------------------------------------------------


def test_shards_of_a_real_file_partition_it_alike_on_cpu_and_emu(
    upstream: Path, skip_all: Path, identity_runs: dict[str, Recorded], tmp_path: Path
):
    file = "test_view_ops.py"
    # The unsharded selection: the identity runs' tests of the file (-k kept them all).
    full = {
        device: set(run.frame.loc[run.frame["file"] == file, "test_id"])
        for device, run in identity_runs.items()
    }
    assert full["cpu"] == full["emu"] and len(full["emu"]) > 250
    # Shard 1 of 2 on emu, shard 2 of 2 on cpu (two runs, not four: each pays for torch).
    # They must split the file between them, test for test: were a test's shard to depend
    # on anything but its test_id (the device, its nodeid, what else was collected), the
    # two would overlap or miss tests.
    shards = {}
    for device, k in (("emu", 1), ("cpu", 2)):
        run_dir = tmp_path / f"{device}-{k}"
        done = run_pytest(
            upstream, file, "--device", device, "--shard", f"{k}/2",
            "--run-dir", str(run_dir), "--skiplist", str(skip_all),
        )  # fmt: skip
        assert done.returncode in (0, 1), tail(done)
        meta, frame = read_run(run_dir)
        assert (meta.shard, meta.complete) == (f"{k}/2", True)
        counts = pytest_counts(done.stdout)
        assert meta.collected == len(frame) == ran(counts)
        assert frame["test_id"].is_unique and set(frame["test_id"]) <= full[device]
        # pytest deselected the other shard's tests: the two are the whole file
        assert len(frame) + counts["deselected"] == len(full[device])
        shards[device] = set(frame["test_id"])

    assert not shards["emu"] & shards["cpu"]  # disjoint
    assert shards["emu"] | shards["cpu"] == full["emu"]  # together the unsharded selection
    # As each device's shards partition its selection (test_shard.py), shard 2 on cpu is
    # shard 2 on emu (the rest of the file), and shard 1 on cpu is shard 1 on emu.
    assert 0.3 < len(shards["emu"]) / len(full["emu"]) < 0.7  # a hash split, roughly even


# -- resume ---------------------------------------------------------------------------------

#: Kills its own pytest process as the 40th test starts, once: an interruption from outside.
KILLER = """
import os, pathlib, signal

FLAG = pathlib.Path(__file__).with_name("killed.flag")
started = 0


def pytest_runtest_setup(item):
    global started
    started += 1
    if started == 40 and not FLAG.exists():
        FLAG.write_text(item.nodeid)
        os.kill(os.getpid(), signal.SIGKILL)
"""


def test_an_interrupted_run_of_a_real_file_resumes_with_each_test_once(
    upstream: Path, tmp_path: Path
):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "kill_at_40th_test.py").write_text(KILLER)
    paths = [str(plugins), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = _environ(PYTHONPATH=os.pathsep.join(paths))
    run_dir = tmp_path / "runs" / "shape-ops"
    # -k: test_flip_cpu_float32 takes 10 s on the CPU, test_rot90 fails there in torch 2.13
    # itself; a resumed run must name the same filter.
    common = ("test_shape_ops.py", "-k", "not test_flip_cpu_float32 and not test_rot90")
    common += ("--device", "cpu", "--no-skiplist", "-p", "kill_at_40th_test")

    killed = run_pytest(upstream, *common, "--run-dir", str(run_dir), env=env)
    assert killed.returncode == -signal.SIGKILL, tail(killed)
    meta, before = read_run(run_dir)
    assert not meta.complete and len(before) == 39 and before["test_id"].is_unique
    killed_nodeid = (plugins / "killed.flag").read_text()
    assert killed_nodeid not in set(before["nodeid"])  # killed before it ended
    lines = (run_dir / "outcomes.jsonl").read_text().splitlines()

    resumed = run_pytest(upstream, *common, "--resume", str(run_dir), env=env)
    assert resumed.returncode == 0, tail(resumed)
    counts = pytest_counts(resumed.stdout)
    assert counts["deselected"] == 39 + 2  # the recorded tests were not run again
    meta, after = read_run(run_dir)
    assert meta.complete and after["test_id"].is_unique
    # every test pytest collected is recorded once: the 39 from before, the rest now
    assert len(after) == ran(counts) + 39 > 90
    assert not after["test_id"].str.contains("test_rot90|test_flip_float32").any()  # -k held
    assert (run_dir / "outcomes.jsonl").read_text().splitlines()[:39] == lines
    assert list(after["nodeid"]).count(killed_nodeid) == 1


# -- classification and repro ---------------------------------------------------------------

#: EMU_PLANT for the planted run: cos reads strided inputs as contiguous, sin.out never
#: writes out, embedding checks devices before its own arguments.
PLANTS = "noncontiguous,ignores_out,device_check_first"

#: test_id -> (outcome, category, detail) in the planted run on emu.
PLANTED = {
    "test_ops.py::TestCommon::test_noncontiguous_samples_cos_float32": (
        "failed", "numerical_mismatch", "values",
    ),
    "test_ops.py::TestCommon::test_out_sin_float32": ("failed", "numerical_mismatch", "values"),
    # emu has no lowering of rsub (its skiplist's cause entry): if it has one now, pick
    # another overload it lacks
    "test_ops.py::TestCommon::test_noncontiguous_samples_rsub_float32": (
        "failed", "missing_lowering", "aten::rsub.Tensor",
    ),
    "test_ops.py::TestCommon::test_out_exp_float32": ("passed", "", ""),  # nothing planted
    "test_modules.py::TestModule::test_errors_nn_Embedding_float32": (
        "failed", "wrong_error", "message",
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def planted_run(upstream: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run on emu of a few tests of test_ops.py and test_modules.py with bugs planted
    (about a minute: test_ops.py alone takes ~40 s to import)."""
    needs_emu()
    run_dir = tmp_path_factory.mktemp("planted") / "planted"
    names = [t.split("::")[-1] for t in PLANTED]
    keyword = " or ".join(name.replace("_float32", "_emu_float32") for name in names)
    done = run_pytest(
        upstream, "test_ops.py", "test_modules.py", "-k", keyword, "--device", "emu",
        "--no-skiplist", "--run-dir", str(run_dir), env=_environ(EMU_PLANT=PLANTS),
    )  # fmt: skip
    assert done.returncode == 1, tail(done)  # the planted failures
    return run_dir


def test_failures_of_real_tests_are_classified_by_their_cause(planted_run: Path):
    meta, frame = read_run(planted_run)
    assert meta.complete and meta.backend == "emu"
    records = frame.set_index("test_id")
    assert set(records.index) == set(PLANTED)
    got = {
        test_id: (records.at[test_id, "outcome"], records.at[test_id, "category"],
                  records.at[test_id, "detail"])
        for test_id in PLANTED
    }  # fmt: skip
    assert got == PLANTED
    rsub = records.loc["test_ops.py::TestCommon::test_noncontiguous_samples_rsub_float32"]
    assert "Could not run 'aten::rsub.Tensor'" in rsub["message"]
    embedding = records.loc["test_modules.py::TestModule::test_errors_nn_Embedding_float32"]
    assert (embedding["template"], embedding["op"]) == ("test_errors", "nn.Embedding")
    assert "does not match" in embedding["message"]  # upstream's assertRaisesRegex


def test_repro_of_a_real_opinfo_failure_rebuilds_the_failing_sample(
    planted_run: Path, upstream: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    _, frame = read_run(planted_run)
    test_id = "test_ops.py::TestCommon::test_noncontiguous_samples_cos_float32"
    record = frame.set_index("test_id").loc[test_id]
    index = int(record["sample_index"])
    assert index >= 0  # upstream's @ops wrapper tracked the sample the test failed on

    script = tmp_path / "repro.py"
    code = main(["repro", str(planted_run), test_id, "--script", str(script)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "in run planted on emu: failed (numerical_mismatch values)" in out
    assert f"failing sample: {index}" in out
    # the command runs that one test, with that one sample, where the run ran it
    command = next(line.strip() for line in out.splitlines() if "python -m pytest" in line)
    assert command.startswith(f"cd {upstream} && ")
    assert f"PYTORCH_OPINFO_SAMPLE_INPUT_INDEX={index} " in command
    assert f" {record['nodeid']} --device emu" in command

    planted = _run_script(script, EMU_PLANT="noncontiguous")
    assert planted.returncode == 1, planted.stdout + planted.stderr
    assert f"sample {index} of cos in torch.float32" in planted.stdout
    assert "FAIL  a non-contiguous copy gives the same result: AssertionError" in planted.stdout
    fixed = _run_script(script)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "ok    a non-contiguous copy gives the same result" in fixed.stdout
