"""emu's c10d backend: registration, the collectives the embedded suite leaves out, refusals.

The embedded suite's ``test_distributed.py`` checks the collectives and DDP against the CPU;
these tests check what is emu's own: that the backend is registered as emu's default, that
every c10d operator reaches emu's kernels (the coalesced and rooted collectives, any-source
receives, ``batch_isend_irecv``, the functional collectives), and the refusals' wording. The
ranks run in a child process (two forked ranks), so this process never joins a group.
"""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist

from tests.backend.conftest import run_python

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="needs gloo"
)


def test_emuccl_is_the_default_backend_of_emu():
    from torch_emu import distributed

    assert dist.get_default_backend_for_device("emu") == distributed.BACKEND == "emuccl"
    assert dist.Backend.backend_capability["emuccl"] == ["emu"]
    assert dist.get_default_backend_for_device("cpu") == "gloo"  # the CPU's stays


def test_every_c10d_operator_has_an_emu_kernel():
    from torch_emu.distributed import KERNELS

    operators = {
        name.split("::")[1]
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("c10d::") and "PrivateUse1:" in torch._C._dispatch_dump(name)
    }
    assert operators == set(KERNELS)
    for name in KERNELS:
        assert "torch_emu/distributed.py" in torch._C._dispatch_dump(f"c10d::{name}"), name


PROBE = r"""
import json, os, sys, tempfile, torch, torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.multiprocessing as mp

def run(rank, path, out):
    torch.emu.set_device(rank)
    dev = torch.device("emu", rank)
    dist.init_process_group(store=dist.FileStore(path, 2), rank=rank, world_size=2)
    got = {}
    def record(name, fn):
        try:
            got[name] = fn()
        except Exception as error:
            got[name] = "error: " + str(error).splitlines()[0]
    def ar(dtype, op, values):
        t = torch.tensor(values[rank], device=dev).to(dtype)
        dist.all_reduce(t, op=op)
        return t.cpu().tolist()
    record("config", lambda: dist.get_backend_config())
    record("group on emu", lambda: [d.type for d in dist.group.WORLD._device_types])
    record("sum int16", lambda: ar(torch.int16, dist.ReduceOp.SUM, [[300, -2], [300, 5]]))
    record("sum uint32", lambda: ar(torch.uint32, dist.ReduceOp.SUM, [[4000000000], [294967297]]))
    record("sum uint64", lambda: ar(torch.uint64, dist.ReduceOp.SUM, [[2**62], [2**62]]))
    record("max uint64", lambda: ar(torch.uint64, dist.ReduceOp.MAX, [[1], [2]]))
    record("avg float16", lambda: ar(torch.float16, dist.ReduceOp.AVG, [[1, 3], [2, 6]]))
    record("avg int64", lambda: ar(torch.int64, dist.ReduceOp.AVG, [[1], [2]]))
    record("sum float8", lambda: ar(torch.float8_e4m3fn, dist.ReduceOp.SUM, [[1], [2]]))
    record("premul_sum", lambda: ar(torch.float32, dist._make_nccl_premul_sum(2.0), [[1], [2]]))
    def coalesced():
        ts = [torch.full((2,), rank + 1.0, device=dev), torch.full((3,), 10.0 * (rank + 1), device=dev)]
        dist.all_reduce_coalesced(ts)
        return [t.cpu().tolist() for t in ts]
    record("all_reduce_coalesced", coalesced)
    def reduce():
        t = torch.full((2,), rank + 1.0, device=dev)
        dist.reduce(t, dst=0)
        return t.cpu().tolist()
    record("reduce to 0", reduce)
    def gather():
        gathered = [torch.empty(2, device=dev) for _ in range(2)] if rank == 0 else None
        dist.gather(torch.full((2,), rank + 1.0, device=dev), gathered, dst=0)
        return [g.cpu().tolist() for g in gathered] if gathered else None
    record("gather to 0", gather)
    def scatter():
        out = torch.empty(2, device=dev)
        parts = [torch.full((2,), 7.0 + r, device=dev) for r in range(2)] if rank == 0 else None
        dist.scatter(out, parts, src=0)
        return out.cpu().tolist()
    record("scatter from 0", scatter)
    def ag_coalesced():
        outs = [torch.empty(4, device=dev), torch.empty(2, dtype=torch.int16, device=dev)]
        ins = [torch.full((2,), rank + 1.0, device=dev), torch.full((1,), rank + 5, dtype=torch.int16, device=dev)]
        with dist._coalescing_manager():
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        return [o.cpu().tolist() for o in outs]
    record("all_gather_into_tensor coalesced", ag_coalesced)
    def rs_coalesced():
        outs = [torch.empty(1, device=dev), torch.empty(2, device=dev)]
        ins = [torch.arange(2.0, device=dev) + rank, torch.arange(4.0, device=dev) * (rank + 1)]
        with dist._coalescing_manager():
            for o, i in zip(outs, ins):
                dist.reduce_scatter_tensor(o, i, op=dist.ReduceOp.AVG)
        return [o.cpu().tolist() for o in outs]
    record("reduce_scatter_tensor coalesced, avg", rs_coalesced)
    def any_source():
        if rank == 1:
            dist.send(torch.tensor([42.0], device=dev), 0)
            return None
        t = torch.zeros(1, device=dev)
        work = dist.group.WORLD.recv_anysource([t], 0)
        work.wait()
        return [t.cpu().tolist(), work._source_rank()]
    record("recv from any source", any_source)
    def batch():
        mine = torch.full((2,), float(rank), device=dev)
        theirs = torch.empty(2, device=dev)
        peer = 1 - rank
        ops = [dist.P2POp(dist.isend, mine, peer), dist.P2POp(dist.irecv, theirs, peer)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return theirs.cpu().tolist()
    record("batch_isend_irecv", batch)
    def functional():
        x = torch.arange(4.0, device=dev) + rank
        a = fc.all_reduce(x, "avg", dist.group.WORLD)
        b = fc.reduce_scatter_tensor(x, "sum", 0, dist.group.WORLD)
        c = fc.all_gather_tensor(x[:1], 0, dist.group.WORLD)
        d = fc.all_to_all_single(x, None, None, dist.group.WORLD)
        return [fc.wait_tensor(t).cpu().tolist() for t in (a, b, c, d)]
    record("functional", functional)
    def objects():
        got = [None, None]
        dist.all_gather_object(got, {"rank": rank})
        return got
    record("all_gather_object", objects)
    dist.destroy_process_group()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(got, f)

if __name__ == "__main__":
    path = tempfile.NamedTemporaryFile(delete=False).name
    out = sys.argv[1]
    ctx = mp.get_context("fork")
    ranks = [ctx.Process(target=run, args=(r, path, out)) for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(120)
        if p.exitcode is None:
            p.kill()
    print(json.dumps([p.exitcode for p in ranks]))
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("dist")
    script, out = folder / "probe.py", folder / "out.json"
    script.write_text(PROBE)
    result = run_python(
        f"import runpy, sys; sys.argv = ['probe', {str(out)!r}]; "
        f"runpy.run_path({str(script)!r}, run_name='__main__')"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [0, 0], result.stderr[-3000:]
    return json.loads(out.read_text())


def test_the_group_is_emus(probe):
    assert probe["config"] == "emu:emuccl"
    assert probe["group on emu"] == ["emu"]


def test_reductions_gloo_cannot_do_are_made_up_for(probe):
    assert probe["sum int16"] == [600, 3]  # in int64, then back: no overflow on the way
    assert probe["sum uint32"] == [1]  # wraps as uint32 arithmetic does
    assert probe["sum uint64"] == [2**63]
    assert probe["avg float16"] == [1.5, 4.5]


def test_refusals_name_what_is_refused(probe):
    assert "unsupported dtype torch.uint64 for ReduceOp.MAX" in probe["max uint64"]
    assert "unsupported feature 'ReduceOp.AVG' on integer dtypes" in probe["avg int64"]
    assert "unsupported dtype torch.float8_e4m3fn" in probe["sum float8"]
    assert "unsupported feature 'ReduceOp.PREMUL_SUM'" in probe["premul_sum"]
    assert probe["max uint64"].startswith("error: emu's c10d backend (emuccl)")


def test_the_collectives_beyond_the_embedded_suite(probe):
    assert probe["all_reduce_coalesced"] == [[3.0, 3.0], [30.0, 30.0, 30.0]]
    assert probe["reduce to 0"] == [3.0, 3.0]
    assert probe["gather to 0"] == [[1.0, 1.0], [2.0, 2.0]]
    assert probe["scatter from 0"] == [7.0, 7.0]
    assert probe["all_gather_into_tensor coalesced"] == [[1.0, 1.0, 2.0, 2.0], [5, 6]]
    assert probe["reduce_scatter_tensor coalesced, avg"] == [[0.5], [0.0, 1.5]]
    assert probe["recv from any source"] == [[42.0], 1]
    assert probe["batch_isend_irecv"] == [1.0, 1.0]
    assert probe["functional"] == [
        [0.5, 1.5, 2.5, 3.5],
        [1.0, 3.0],
        [0.0, 1.0],
        [0.0, 1.0, 1.0, 2.0],
    ]
    assert probe["all_gather_object"] == [{"rank": 0}, {"rank": 1}]
