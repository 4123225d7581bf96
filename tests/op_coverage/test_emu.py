"""The static table, triage and tracing on the real emu backend.

emu is used from its installed package, or else from the source tree when its native core
is built there; without either the tests are skipped. Each check runs in a fresh process,
because loading emu renames PrivateUse1 for the whole process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# A fresh process that loads emu and builds its tables takes 10-20 s on 2 cores.
pytestmark = pytest.mark.slow

BACKEND_TREE = Path(__file__).resolve().parents[2] / "backend"

SCRIPT = textwrap.dedent(
    """
    import json, re
    import pandas, torch
    import torch_emu
    from op_coverage.static import load_static_table
    from op_coverage.tracing import trace_ops
    from op_coverage.triage import triage

    OP = "aten::special_erfcx.out"  # a pointwise op emu does not lower

    def run_test():
        x = torch.arange(1.0, 5.0, device="emu")
        try:
            with trace_ops(fallback_counts=torch_emu.fallback_counts) as trace:
                got = torch.special.erfcx(x)
            assert torch.allclose(got.cpu(), torch.special.erfcx(x.cpu()))
            return {"outcome": "passed", "category": "", "detail": "", "ops": trace.ops,
                    "fallback": trace.fallback}
        except NotImplementedError as exc:
            match = re.search(r"Could not run '([^']+)' with arguments from the '([^']+)' backend", str(exc))
            return {"outcome": "failed", "category": "missing_lowering", "detail": match[1],
                    "backend": match[2], "ops": trace.ops}

    def statuses(table):
        return {op: (row.status, row.in_core) for op, row in table.ops.items()}

    def records(result):
        return pandas.DataFrame([{"test_id": "test_ops.py::TestCommon::test_special_erfcx_float32",
                                  "template": "test_compare_cpu", "op": "special_erfcx", "dtype": "float32",
                                  "outcome": result["outcome"], "category": result["category"],
                                  "detail": result["detail"]}])

    out = {}
    table = load_static_table("emu", "torch_emu")
    out["counts"] = table.counts()
    out["registry_by_device_alone"] = load_static_table("emu").has_registry
    out["disagreements"] = [[d.op, d.problem] for d in table.disagreements]
    out["direct_kernels"] = sorted(op for op in table.ops
                                   if torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"))
    out["table_native"] = sorted(op for op, row in table.ops.items() if row.status == "native")
    out["declined"] = sorted(op for op, row in table.ops.items() if row.kind.startswith("unsupported:"))
    out["registry"] = sorted({l.overload for l in torch_emu.lowerings() if l.overload.startswith("aten::")})
    out["before_status"] = table.ops[OP].status
    before = run_test()
    out["before"] = before
    out["ranked_before"] = [r.op for r in triage(records(before), statuses(table)).ranked]

    torch_emu.set_cpu_fallback(True)
    out["with_fallback"] = run_test()
    out["fallback_status"] = load_static_table("emu", "torch_emu").ops[OP].status
    torch_emu.set_cpu_fallback(False)

    def erfcx_out(self, *, out):
        result = torch.special.erfcx(self.cpu())
        out.resize_(result.shape)
        out.copy_(result)
        return out

    lib = torch.library.Library("aten", "IMPL")
    lib.impl("special_erfcx.out", erfcx_out, "PrivateUse1")
    table = load_static_table("emu", "torch_emu")
    out["after_status"] = [table.ops[OP].status, table.ops[OP].kind]
    out["after_problems"] = [d.problem for d in table.disagreements if d.op == OP]
    out["resolved_by_table"] = [r.op for r in triage(records(before), statuses(table)).resolved]
    after = run_test()
    out["after"] = after
    out["ranked_after"] = [r.op for r in triage(records(after), statuses(table)).ranked]
    print(json.dumps(out))
    """
)


def _emu_env() -> dict[str, str] | None:
    env = dict(os.environ)
    if importlib.util.find_spec("torch_emu") is not None:
        return env
    if any(BACKEND_TREE.glob("torch_emu/_C*.so")):
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(BACKEND_TREE), env.get("PYTHONPATH")])
        )
        return env
    return None


@pytest.fixture(scope="module")
def emu(tmp_path_factory) -> dict:
    env = _emu_env()
    if env is None:
        pytest.skip("torch_emu is neither installed nor built in backend/")
    script = tmp_path_factory.mktemp("emu") / "emu_coverage.py"
    script.write_text(SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_static_table_agrees_with_the_dispatcher_and_the_registry(emu):
    assert emu["registry_by_device_alone"]  # the registry is found from the device name
    assert emu["disagreements"] == []
    assert set(emu["table_native"]) == set(emu["direct_kernels"]) - set(emu["declined"])
    assert set(emu["registry"]) <= set(emu["table_native"])
    assert sum(emu["counts"].values()) > 2000 and emu["counts"]["native"] > 0


def test_missing_op_blocks_its_test_and_is_ranked(emu):
    assert emu["before_status"] == "missing"
    before = emu["before"]
    assert (before["outcome"], before["detail"], before["backend"]) == (
        "failed",
        "aten::special_erfcx.out",
        "emu",
    )
    assert emu["ranked_before"] == ["aten::special_erfcx.out"]
    assert "aten::special_erfcx" in before["ops"]  # traced on emu: the op the test called


def test_cpu_fallback_is_seen_statically_and_per_test(emu):
    assert emu["fallback_status"] == "fallback"
    assert emu["with_fallback"]["outcome"] == "passed"
    assert emu["with_fallback"]["fallback"] == ["aten::special_erfcx.out"]


def test_lowering_added_at_run_time_moves_op_to_native_and_unblocks_its_test(emu):
    assert emu["after_status"] == ["native", "python"]
    assert emu["after_problems"] == [
        "the dispatcher runs a backend kernel the registry does not list"
    ]
    assert emu["resolved_by_table"] == ["aten::special_erfcx.out"]
    assert emu["after"]["outcome"] == "passed"
    assert emu["ranked_after"] == []
