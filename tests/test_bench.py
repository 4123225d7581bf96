"""The benchmarks under bench/ run to the end with no arguments, as ``nox -s bench`` runs
them: each parser accepts an empty command line. No benchmark runs here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def load(path: Path) -> ModuleType:
    # Under its own name: bench/op_coverage.py would otherwise shadow the op_coverage package.
    spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_benchmarks():
    assert len(SCRIPTS) >= 5


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_benchmark_parses_an_empty_command_line(path):
    module = load(path)
    assert callable(getattr(module, "build_parser", None)), f"{path.name} has no build_parser()"
    module.build_parser().parse_args([])  # SystemExit (an argparse error) fails the test


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_every_benchmark_answers_help(path, capsys):
    with pytest.raises(SystemExit) as info:
        load(path).build_parser().parse_args(["--help"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


def test_op_coverage_runs_every_part_with_its_defaults_without_arguments(monkeypatch):
    module = load(BENCH / "op_coverage.py")
    ran = []
    for name in module.PARTS:
        monkeypatch.setitem(module.PARTS, name, ran.append)
    module.main([])
    assert [args.bench for args in ran] == ["tracing", "smoke", "triage"]
    tracing, smoke, triage = ran
    assert (tracing.device, tracing.rounds, tracing.samples) == ("emu", 3, 4)
    assert (smoke.device, smoke.rounds) == ("emu", 1)
    assert (triage.outcomes, triage.snapshot) == (154_000, False)

    ran.clear()
    module.main(["triage", "--outcomes", "10"])  # one part still picked by name
    assert [(args.bench, args.outcomes) for args in ran] == [("triage", 10)]


def test_plugin_overhead_measures_both_parts_by_default():
    module = load(BENCH / "plugin_overhead.py")
    assert module.build_parser().parse_args([]).part == "both"
