"""Skiplist entries scoped to an execution mode (eager or compile)."""

from __future__ import annotations

from pathlib import Path

import pytest

import skiplists
from conformance.model import ResultRecord, RunMeta, TestIdentity
from conformance.store import RunWriter
from skiplists import SkiplistError

OUT = "embedded/test_ops.py::TestCommon::test_out_abs_float32"
CMP = "embedded/test_ops.py::TestCommon::test_compare_cpu_abs_float32"

TEXT = f"""[skiplist]
suite = "embedded"

[[skip]]
test_id = "{OUT}"
tier = "xfail"
category = "compile_error"
detail = "graph_break"
reason = "Dynamo refuses to resize an out= tensor under fullgraph"
mode = "compile"

[[skip]]
test_id = "{CMP}"
tier = "xfail"
category = "numerical_mismatch"
reason = "emu's abs rounds differently"
"""


def identity(test_id: str) -> TestIdentity:
    file, cls, name = test_id.split("::")
    return TestIdentity(nodeid=test_id, test_id=test_id, file=file, test_class=cls,
                        template=name.rsplit("_", 2)[0], suite="embedded")  # fmt: skip


def test_a_run_loads_the_entries_of_its_mode_and_those_of_every_mode(tmp_path: Path):
    path = tmp_path / "emu.toml"
    path.write_text(TEXT)
    load = lambda mode: skiplists.load([path], backend="emu", torch_version="2.13.0", mode=mode)  # noqa: E731
    compiled, eager, every = load("compile"), load("eager"), load(None)
    assert compiled.match(identity(OUT)).selector.mode == "compile"
    assert eager.match(identity(OUT)) is None  # eager runs do not see compile entries
    assert eager.match(identity(CMP)) is not None and compiled.match(identity(CMP)) is not None
    assert len(every.entries) == 2  # tools without a run (lint) see all
    assert "mode=compile" in compiled.match(identity(OUT)).selector.describe()


def test_the_header_scopes_a_file_to_a_mode_and_bad_modes_are_named(tmp_path: Path):
    path = tmp_path / "emu.toml"
    path.write_text(TEXT.replace('suite = "embedded"', 'suite = "embedded"\nmode = "compile"'))
    eager = skiplists.load([path], backend="emu", torch_version="2.13.0", mode="eager")
    assert eager.entries == ()
    path.write_text(TEXT.replace('mode = "compile"', 'mode = "jit"'))
    with pytest.raises(SkiplistError) as raised:
        skiplists.load([path], backend="emu", torch_version="2.13.0")
    assert "'jit' is not a mode; use one of eager, compile" in str(raised.value)
    assert "emu.toml:10" in str(raised.value)


def _run(run_dir: Path, mode: str, rows: list[tuple[str, str, str, str]]) -> None:
    writer = RunWriter(
        run_dir, RunMeta(run_id=run_dir.name, backend="emu", suite="embedded:smoke", mode=mode)
    )
    for test_id, outcome, category, detail in rows:
        ident = identity(test_id)
        writer.write(ResultRecord(run_id=run_dir.name, nodeid=test_id, test_id=test_id, file=ident.file,
                                  test_class=ident.test_class, template=ident.template, suite="embedded",
                                  device="emu", outcome=outcome, category=category, detail=detail,
                                  message="torch._dynamo.exc.Unsupported: out= resize", mode=mode))  # fmt: skip
    writer.close()


def test_update_from_a_compile_run_scopes_its_entries_and_keeps_entries_of_every_mode(
    tmp_path: Path,
):
    from conformance.cli import main

    path = tmp_path / "emu.toml"
    path.write_text(TEXT.replace(OUT, OUT.replace("abs", "neg")))
    # Compiled, abs's out= graph-breaks and its comparison passes (the eager entry's test).
    _run(tmp_path / "run", "compile", [(OUT, "failed", "compile_error", "graph_break"),
                                        (CMP, "passed", "", "")])  # fmt: skip
    common = ["skiplist", "update", "--from", str(tmp_path / "run"), "--skiplist", str(path)]
    assert main([*common, "--to", str(path), "--prune", "--torch", "2.13.0"]) == 0
    entries = skiplists.load([path], backend="emu", torch_version="2.13.0").entries
    added = next(e for e in entries if OUT in e.selector.test_ids)
    assert added.selector.mode == "compile" and added.category == "compile_error"
    # The entry for every mode stays: a compile run's pass says nothing of eager runs.
    assert any(CMP in e.selector.test_ids for e in entries)
