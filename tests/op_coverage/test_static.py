"""The static table against the dispatcher, and lowerings registered at run time.

Registering kernels changes the process-wide dispatcher, so those checks run in a fresh
Python process that reports what it saw as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conformance.errors import ConfigError
from op_coverage.static import static_table
from op_coverage.triage import triage

from .conftest import frame

SCRIPT = textwrap.dedent(
    """
    import json, sys
    import torch
    from op_coverage.static import static_table

    def facts(table):
        return {
            "rows": {op: [r.status, r.kind, r.source] for op, r in table.ops.items()
                     if op in ("aten::cumsum.out", "aten::abs.out", "aten::sin.out", "aten::add.Tensor")},
            "disagreements": [[d.op, d.problem] for d in table.disagreements],
            "counts": table.counts(),
            "native_by_dispatcher": sorted(
                op for op in table.ops
                if torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")),
        }

    out = {"before": facts(static_table("privateuseone", []))}

    def cumsum_out(self, dim, *, dtype=None, out):
        raise NotImplementedError("planted")

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("cumsum.out", cumsum_out, "PrivateUse1")
    lib.impl("abs.out", cumsum_out, "PrivateUse1")
    registry = [
        {"overload": "aten::cumsum.out", "kind": "python", "source": "lowering/scan.py:7"},
        {"overload": "aten.sin.out", "kind": "python", "source": "lowering/pointwise.py:3"},
        {"overload": "emu::cpu_alias", "kind": "native", "source": "core.cpp:1"},
    ]
    out["after"] = facts(static_table("privateuseone", registry))
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(lambda op, keys, *args, **kwargs: None, "PrivateUse1")
    out["fallback"] = facts(static_table("privateuseone", None))
    out["other"] = static_table("privateuseone", registry).other_namespaces
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def registered(tmp_path_factory) -> dict:
    # A real file, as a backend's lowerings are: the dispatcher records its name and line.
    script = tmp_path_factory.mktemp("lowering") / "planted_lowerings.py"
    script.write_text(SCRIPT, encoding="utf-8")
    # A bare PrivateUse1: no installed backend may autoload into the process.
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=240, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_static_table_agrees_with_the_dispatcher(registered):
    for side in ("before", "after", "fallback"):
        facts = registered[side]
        native = sorted(op for op, row in facts["rows"].items() if row[0] == "native")
        assert set(native) <= set(facts["native_by_dispatcher"])
        assert facts["counts"]["native"] == len(facts["native_by_dispatcher"])


@pytest.mark.slow
def test_a_lowering_added_at_run_time_moves_its_op_to_native(registered):
    assert registered["before"]["rows"]["aten::cumsum.out"][0] == "missing"
    status, kind, source = registered["after"]["rows"]["aten::cumsum.out"]
    assert (status, kind, source) == ("native", "python", "lowering/scan.py:7")
    assert registered["after"]["counts"]["native"] == registered["before"]["counts"]["native"] + 2


@pytest.mark.slow
def test_registry_and_dispatcher_disagreements_are_reported(registered):
    problems = dict(map(tuple, registered["after"]["disagreements"]))
    assert "no kernel of the backend" in problems["aten::sin.out"]  # listed, not registered
    assert "does not list" in problems["aten::abs.out"]  # registered, not listed
    assert "aten::cumsum.out" not in problems
    assert registered["other"] == ["emu::cpu_alias"]


@pytest.mark.slow
def test_a_backend_fallback_turns_missing_ops_into_fallback(registered):
    facts = registered["fallback"]
    assert facts["rows"]["aten::sin.out"][0] == "fallback"
    assert facts["rows"]["aten::cumsum.out"][0] == "native"
    assert facts["counts"]["missing"] == 0
    assert facts["disagreements"] == []  # no registry: the dispatcher alone


@pytest.mark.slow
def test_runtime_lowering_takes_its_tests_out_of_the_blocked_list(registered, planted_rows):
    records = frame(planted_rows)
    before = {op: (row[0], False) for op, row in registered["before"]["rows"].items()}
    after = {op: (row[0], False) for op, row in registered["after"]["rows"].items()}
    assert "aten::cumsum.out" in [r.op for r in triage(records, before).ranked]
    moved = triage(records, after)
    assert "aten::cumsum.out" not in [r.op for r in moved.ranked]
    assert [r.op for r in moved.resolved] == ["aten::cumsum.out"]


def test_cpu_table_from_the_dispatcher_alone():
    table = static_table("cpu")
    assert table.dispatch_key == "CPU" and not table.has_registry
    assert table.ops["aten::add.out"].status == "native"
    assert table.ops["aten::add.Tensor"].in_core
    assert sum(table.counts().values()) == len(table.ops)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"kind": "python"}, r"lowerings\(\)\[0\]: lowering has no 'overload'"),
        ({"overload": "aten::sin.out", "kind": "triton"}, "kind 'triton'"),
        ({"overload": "sin out", "kind": "python"}, "not an operator overload name"),
    ],
)
def test_malformed_registry_entries_are_named(entry, message):
    with pytest.raises(ConfigError, match=message):
        static_table("cpu", [entry])
