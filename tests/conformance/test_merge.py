"""Merging shard runs into one run."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.cli import main
from conformance.errors import ConfigError
from conformance.merge import merge_runs
from conformance.model import ResultRecord, RunMeta
from conformance.store import RunWriter, read_run


def make_shard(root: Path, name: str, shard: str, nodeids: list[str], **meta: object) -> Path:
    fields = {"backend": "emu", "torch_version": "2.13.0+cpu", "suite": "embedded:smoke"}
    fields.update(meta)
    run_dir = root / name
    writer = RunWriter(run_dir, RunMeta(run_id=name, shard=shard, start_time=f"t{name}", **fields))
    for nodeid in nodeids:
        writer.write(
            ResultRecord(run_id=name, nodeid=nodeid, test_id=nodeid, file="f.py", outcome="passed")
        )
    writer.close(collected=len(nodeids), end_time=f"e{name}")
    return run_dir


def test_merge_unites_the_records_of_every_shard(tmp_path: Path) -> None:
    a = make_shard(tmp_path, "a", "1/2", ["f.py::T::a", "f.py::T::b"])
    b = make_shard(tmp_path, "b", "2/2", ["f.py::T::c"])
    meta = merge_runs([a, b], tmp_path / "merged")
    assert meta.complete and meta.shard == "" and meta.collected == 3
    assert (meta.start_time, meta.end_time) == ("ta", "eb")
    read_meta, frame = read_run(tmp_path / "merged")
    assert read_meta.complete
    assert sorted(frame.nodeid) == ["f.py::T::a", "f.py::T::b", "f.py::T::c"]
    assert set(frame.run_id) == {"merged"}


def test_merge_of_some_shards_is_incomplete(tmp_path: Path) -> None:
    a = make_shard(tmp_path, "a", "1/3", ["f.py::T::a"])
    b = make_shard(tmp_path, "b", "3/3", ["f.py::T::c"])
    meta = merge_runs([a, b], tmp_path / "merged")
    assert not meta.complete and meta.shard == "1,3/3"


@pytest.mark.parametrize(
    ("second", "message"),
    [
        ({"shard": "1/2"}, "shard 1/2 is also"),
        ({"shard": "2/3"}, "of 3 shards"),
        ({"shard": ""}, "expected K/N"),
        ({"shard": "2/2", "backend": "cpu"}, "backend is 'cpu'"),
        ({"shard": "2/2", "suite": "upstream:v2.13.0"}, "not shards of the same run"),
    ],
)
def test_merge_refuses_runs_that_are_not_shards_of_one_run(
    tmp_path: Path, second: dict[str, str], message: str
) -> None:
    a = make_shard(tmp_path, "a", "1/2", ["f.py::T::a"])
    shard = second.pop("shard")
    b = make_shard(tmp_path, "b", shard, ["f.py::T::b"], **second)
    with pytest.raises(ConfigError, match=message) as info:
        merge_runs([a, b], tmp_path / "merged")
    assert str(b) in str(info.value)
    assert not (tmp_path / "merged").exists()


def test_merge_command_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_shard(tmp_path, "a", "1/2", ["f.py::T::a"])
    make_shard(tmp_path, "b", "2/2", ["f.py::T::b"])
    root = str(tmp_path)
    assert main(["merge", "a", "b", "--runs-root", root, "--run-id", "all"]) == 0
    assert "complete" in capsys.readouterr().out
    assert main(["merge", "a", "--runs-root", root, "--run-id", "half"]) == 1
    assert main(["merge", "a", "missing", "--runs-root", root]) == 2
    assert "no run named 'missing'" in capsys.readouterr().err
