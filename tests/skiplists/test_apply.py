"""Applying skiplists at collection, end to end through pytest runs (pytester)."""

from __future__ import annotations

import textwrap

import pytest

from conformance.store import read_run

# The test project applies the skiplist the way the conformance plugin does: identities
# from parse_nodeid, one apply_to_items call, deselected items removed and reported.
# Identities come from a small parser below (LIGHT_PARSER), not conformance.identity: that
# one imports torch, which cannot be imported twice, and pytester's in-process runs drop the
# modules a run imported. The conformance plugin itself is tested in a subprocess.
CONFTEST = """
import pytest

import skiplists
from conformance.identity import parse_nodeid


def pytest_addoption(parser):
    parser.addoption("--skiplist", action="append", default=[])


def pytest_collection_modifyitems(config, items):
    paths = config.getoption("skiplist")
    if not paths:
        return
    skiplist = skiplists.load(paths, backend="emu", torch_version="2.13.0")
    identities = {item.nodeid: parse_nodeid(item.nodeid, ["emu"]) for item in items}
    deselected = skiplists.apply_to_items(items, skiplist, identities)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        gone = set(map(id, deselected))
        items[:] = [item for item in items if id(item) not in gone]
"""

# Upstream style: unittest classes instantiated for a PrivateUse1 backend named emu; the
# first class has the PRIVATEUSE1 suffix, later ones the backend's name.
UPSTREAM = """
import unittest


class TestMathPRIVATEUSE1(unittest.TestCase):
    def test_add_emu_float32(self):
        assert 1 + 1 == 3

    def test_add_emu_float16(self):
        assert 1 + 1 == 3

    def test_mul_emu_float32(self):
        pass

    def test_div_emu_int64(self):
        raise unittest.SkipTest("div needs a float dtype")

    @unittest.expectedFailure
    def test_sub_emu_float32(self):
        pass  # fails upstream on CPU, passes on this device

    @unittest.expectedFailure
    def test_neg_emu_float32(self):
        assert False


class TestShapesEMU(unittest.TestCase):
    def test_view_emu(self):
        assert False

    def test_cat_emu_float32(self):
        pass
"""

# Identities for the fixture's names without torch's op database (which takes seconds to
# load): generic class, template, dtype, device token removed.
LIGHT_PARSER = """
from conformance.model import TestIdentity


def parse_nodeid(nodeid, devices):
    file, cls, name = nodeid.split("::")
    cls = cls.removesuffix("PRIVATEUSE1").removesuffix("EMU")
    stem, _, dtype = name.partition("_emu")
    name = stem + dtype
    return TestIdentity(nodeid, f"{file}::{cls}::{name}", file, cls, stem, dtype=dtype[1:])
"""

ENTRY = """
[[skip]]
{selector}
tier = "{tier}"
category = "{category}"
reason = "a reason for the test"
{extra}
"""


def entry(selector: str, tier: str, category: str = "known_bug", extra: str = "") -> str:
    return ENTRY.format(selector=selector, tier=tier, category=category, extra=extra)


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the test project's conftest applies the skiplist: no installed plugins.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def run(pytester: pytest.Pytester, *entries: str, args: tuple[str, ...] = ()):
    conftest = CONFTEST.replace("from conformance.identity import parse_nodeid", LIGHT_PARSER)
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_math=UPSTREAM)
    path = pytester.makefile(".toml", skiplist="\n".join(entries))
    return pytester.inline_run("--skiplist", str(path), *args)


def outcomes(reprec) -> dict[str, str]:
    """nodeid's test name -> outcome as a user reads it (xfailed/xpassed included)."""
    result = {}
    for report in reprec.getreports("pytest_runtest_logreport"):
        name = report.nodeid.rsplit("::", 1)[-1]
        if report.when == "call" or (report.when == "setup" and report.skipped):
            if hasattr(report, "wasxfail"):
                result[name] = "xfailed" if report.skipped else "xpassed"
            else:
                result[name] = report.outcome
    for call in reprec.getcalls("pytest_deselected"):
        for item in call.items:
            result[item.nodeid.rsplit("::", 1)[-1]] = "deselected"
    return result


def properties(reprec, name: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for report in reprec.getreports("pytest_runtest_logreport"):
        if report.nodeid.endswith("::" + name):
            props.update(dict(report.user_properties))
    return props


def test_xfail_tier_is_strict_so_a_fix_shows_up(pytester: pytest.Pytester) -> None:
    reprec = run(
        pytester,
        entry('test_id = "test_math.py::TestMath::test_add_float32"', "xfail"),
        entry('test_id = "test_math.py::TestMath::test_mul_float32"', "xfail"),
    )
    got = outcomes(reprec)
    assert got["test_add_emu_float32"] == "xfailed"
    assert got["test_mul_emu_float32"] == "failed"  # passes now: strict xfail fails
    report = next(
        r
        for r in reprec.getreports("pytest_runtest_logreport")
        if r.nodeid.endswith("test_mul_emu_float32") and r.when == "call"
    )
    assert "[XPASS(strict)]" in str(report.longrepr)
    assert properties(reprec, "test_add_emu_float32") == {
        "skip_entry": "skiplist.toml:1",
        "skip_category": "known_bug",
        "skip_detail": "",
    }


@pytest.mark.slow  # a subprocess that imports torch and its op database
def test_through_the_conformance_plugin_every_record_names_its_entry(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_math=UPSTREAM.replace("PRIVATEUSE1", "CPU")
        .replace("EMU", "CPU")
        .replace("_emu", "_cpu")
    )
    path = pytester.makefile(
        ".toml",
        skiplist="\n".join(
            [
                entry(
                    'test_id = "test_math.py::TestMath::test_add_float32"',
                    "xfail",
                    "missing_lowering",
                    'detail = "aten::add.Tensor"',
                ),
                entry(
                    'class = "TestMath"\ntemplate = "test_add"\ndtypes = ["float16"]',
                    "skip",
                    "unsupported_dtype",
                    'detail = "float16"',
                ),
                entry('test_id = "test_math.py::TestShapes::test_view"', "deselect", "crash"),
                entry('test_id = "test_math.py::TestMath::test_div_int64"', "xfail"),
            ]
        ),
    )
    headers = [n for n, line in enumerate(path.read_text().splitlines(), 1) if line == "[[skip]]"]
    where = [f"skiplist.toml:{n}" for n in headers]
    run_dir = pytester.path / "run"
    result = pytester.runpytest_subprocess(
        "-p",
        "conformance.plugin",
        "--device",
        "cpu",
        "--skiplist",
        str(path),
        "--run-dir",
        str(run_dir),
        "test_math.py",
    )
    assert "INTERNALERROR" not in result.stdout.str()
    _meta, frame = read_run(run_dir)
    rows = {r["test_id"].rsplit("::", 1)[-1]: r for r in frame.to_dict("records")}
    assert (rows["test_add_float32"]["outcome"], rows["test_add_float32"]["skip_entry"]) == (
        "xfailed",
        where[0],
    )
    assert rows["test_add_float16"]["outcome"] == "skipped"
    assert rows["test_add_float16"]["skip_entry"] == where[1]
    assert (rows["test_view"]["outcome"], rows["test_view"]["skip_entry"]) == (
        "deselected",
        where[2],
    )
    assert rows["test_div_int64"]["outcome"] == "skipped"
    assert rows["test_sub_float32"]["outcome"] == "xpassed"
    assert rows["test_cat_float32"]["skip_entry"] == ""


def test_non_strict_xfail_reports_xpass(pytester: pytest.Pytester) -> None:
    reprec = run(
        pytester,
        entry(
            'test_id = "test_math.py::TestMath::test_mul_float32"',
            "xfail",
            "flaky",
            "strict = false",
        ),
    )
    assert outcomes(reprec)["test_mul_emu_float32"] == "xpassed"


def test_skip_tier_reports_category_and_entry(pytester: pytest.Pytester) -> None:
    reprec = run(
        pytester,
        entry('test_id = "test_math.py::TestShapes::test_view"', "skip", "not_applicable"),
    )
    assert outcomes(reprec)["test_view_emu"] == "skipped"
    report = next(
        r
        for r in reprec.getreports("pytest_runtest_logreport")
        if r.nodeid.endswith("test_view_emu")
    )
    assert "not_applicable: a reason for the test (skiplist.toml:1)" in str(report.longrepr)


def test_deselect_tier_never_runs(pytester: pytest.Pytester) -> None:
    reprec = run(
        pytester, entry('test_id = "test_math.py::TestShapes::test_view"', "deselect", "crash")
    )
    got = outcomes(reprec)
    assert got["test_view_emu"] == "deselected"
    assert got["test_cat_emu_float32"] == "passed"


def test_class_suffix_does_not_matter(pytester: pytest.Pytester) -> None:
    # TestMathPRIVATEUSE1 and TestShapesEMU are both matched by their generic class.
    reprec = run(
        pytester,
        entry('class = "TestMath"\ntemplate = "test_add"', "xfail"),
        entry('class = "TestShapes"\ntemplate = "test_view"', "xfail"),
    )
    got = outcomes(reprec)
    assert got["test_add_emu_float32"] == got["test_add_emu_float16"] == "xfailed"
    assert got["test_view_emu"] == "xfailed"


def test_dtypes_field_selects_only_listed_dtypes(pytester: pytest.Pytester) -> None:
    reprec = run(
        pytester,
        entry('template = "test_add"\ndtypes = ["float16"]', "skip", "unsupported_dtype"),
    )
    got = outcomes(reprec)
    assert got["test_add_emu_float16"] == "skipped"
    assert got["test_add_emu_float32"] == "failed"


def test_pattern_selects_whole_test_ids_and_exact_entries_win(pytester: pytest.Pytester) -> None:
    reprec = run(
        pytester,
        entry(r"pattern = 'test_math\.py::TestMath::test_add_.*'", "skip"),
        entry('test_id = "test_math.py::TestMath::test_add_float32"', "xfail"),
        entry("pattern = 'test_cat'", "skip"),  # a substring only: matches nothing
    )
    got = outcomes(reprec)
    assert got["test_add_emu_float16"] == "skipped"
    assert got["test_add_emu_float32"] == "xfailed"
    assert got["test_cat_emu_float32"] == "passed"


def test_skiptest_in_body_preempts_xfail_and_is_recorded(pytester: pytest.Pytester) -> None:
    reprec = run(pytester, entry('test_id = "test_math.py::TestMath::test_div_int64"', "xfail"))
    assert outcomes(reprec)["test_div_emu_int64"] == "skipped"
    assert "skip_preempted" in properties(reprec, "test_div_emu_int64")


def test_upstream_expected_failure_that_passes_is_an_xpass(pytester: pytest.Pytester) -> None:
    reprec = run(pytester)
    got = outcomes(reprec)
    assert got["test_sub_emu_float32"] == "xpassed"
    assert got["test_neg_emu_float32"] == "xfailed"
    assert properties(reprec, "test_sub_emu_float32")["upstream_xfail"] == "unexpected_success"
    assert reprec.ret == 1  # other tests in the file fail; the unexpected success does not


def test_upstream_expected_failure_with_our_strict_entry_fails(pytester: pytest.Pytester) -> None:
    reprec = run(pytester, entry('test_id = "test_math.py::TestMath::test_sub_float32"', "xfail"))
    assert outcomes(reprec)["test_sub_emu_float32"] == "failed"
    props = properties(reprec, "test_sub_emu_float32")
    assert props["upstream_xfail"] == "unexpected_success"
    assert props["skip_entry"] == "skiplist.toml:1"


def test_user_properties_reach_the_controller_under_xdist(pytester: pytest.Pytester) -> None:
    # Identities made in the conftest so the two workers need not import torch.
    pytester.makeconftest(
        CONFTEST.replace("from conformance.identity import parse_nodeid", LIGHT_PARSER)
    )
    pytester.makepyfile(test_math=UPSTREAM)
    path = pytester.makefile(
        ".toml",
        skiplist=entry(
            'template = "test_add"', "xfail", "missing_lowering", 'detail = "aten::add.Tensor"'
        )
        + entry('test_id = "test_math.py::TestMath::test_div_int64"', "xfail"),
    )
    result = pytester.runpytest_subprocess(
        "-p", "xdist.plugin", "-n", "2", "--skiplist", str(path), "-rA", "--junitxml=out.xml"
    )
    result.assert_outcomes(passed=2, failed=1, xfailed=3, xpassed=1, skipped=1)
    junit = (pytester.path / "out.xml").read_text()
    assert 'name="skip_detail" value="aten::add.Tensor"' in junit
    assert 'name="skip_preempted"' in junit


def test_items_without_identity_are_left_alone(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        textwrap.dedent(CONFTEST)
        .replace("from conformance.identity import parse_nodeid", LIGHT_PARSER)
        .replace("for item in items}", "for item in items if 'Shapes' not in item.nodeid}")
    )
    pytester.makepyfile(test_math=UPSTREAM)
    path = pytester.makefile(".toml", skiplist=entry('template = "test_view"', "deselect", "crash"))
    reprec = pytester.inline_run("--skiplist", str(path))
    assert outcomes(reprec)["test_view_emu"] == "failed"


@pytest.mark.slow  # collects and runs in subprocesses that import torch
def test_sweep_proposes_removing_entries_whose_tests_pass(tmp_path, monkeypatch, capsys) -> None:
    # Not a pytester test: the sweep imports torch in this process, and pytester would drop
    # those modules afterwards (torch cannot be imported twice).
    from tests.skiplists.test_tools import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "test_math.py").write_text(
        UPSTREAM.replace("PRIVATEUSE1", "CPU").replace("EMU", "CPU").replace("_emu", "_cpu")
    )
    path = tmp_path / "skiplist.toml"
    path.write_text(
        "\n".join(
            [
                entry('test_id = "test_math.py::TestMath::test_mul_float32"', "xfail"),
                entry('test_id = "test_math.py::TestMath::test_add_float32"', "xfail"),
                entry('test_id = "test_math.py::TestShapes::test_view"', "deselect", "crash"),
            ]
        )
    )
    before = path.read_text()
    code = cli(
        "sweep",
        "--skiplist",
        path,
        "--backend",
        "cpu",
        "--tests",
        "test_math.py",
        "--rootdir",
        tmp_path,
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert '-test_id = "test_math.py::TestMath::test_mul_float32"' in out
    removed = [line for line in out.splitlines() if line.startswith("-") and "test_id" in line]
    assert removed == ['-test_id = "test_math.py::TestMath::test_mul_float32"']
    assert path.read_text() == before  # only proposed, nothing written without --write
