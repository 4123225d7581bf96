"""Fetching upstream tests, offline: a local git repository with tags stands in for GitHub."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from conformance import fetch
from conformance.errors import ConfigError
from conformance.fetch import (
    MARKER,
    checkout_tag,
    fetch_tests,
    register,
    torch_tag,
    verify_checkout,
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

INSTALLED = torch_tag()


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A repository shaped like pytorch: test/ plus other folders, two release tags."""
    repo = tmp_path_factory.mktemp("pytorch")
    _git(repo, "init", "--quiet", "-b", "main")
    # Serve partial clones as GitHub does, so --filter=blob:none and the lazy fetch of
    # test/'s blobs at checkout are exercised.
    _git(repo, "config", "uploadpack.allowFilter", "true")
    (repo / "torch").mkdir()
    (repo / "torch" / "__init__.py").write_text("# library sources, not wanted\n")
    (repo / "README.md").write_text("pytorch\n")
    (repo / "test").mkdir()
    (repo / "test" / "test_ops.py").write_text("OLD = True\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "older release")
    _git(repo, "tag", "v2.12.0")
    (repo / "test" / "test_ops.py").write_text("RELEASE = 'installed'\n")
    (repo / "test" / "nn").mkdir()
    (repo / "test" / "nn" / "test_convolution.py").write_text("pass\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "installed release")
    _git(repo, "tag", INSTALLED)
    (repo / "test" / "test_ops.py").write_text("RELEASE = 'main'\n")
    _git(repo, "commit", "--quiet", "-am", "after the release")
    return f"file://{repo}"


def test_torch_tag_of_release_versions() -> None:
    assert torch_tag("2.13.0+cpu") == "v2.13.0"
    assert torch_tag("2.13.1") == "v2.13.1"
    assert torch_tag("2.14.0rc2") == "v2.14.0-rc2"
    assert torch_tag() == torch_tag(torch.__version__)
    with pytest.raises(ConfigError, match=r"2\.14\.0\.dev20260101\+cpu is not a release"):
        torch_tag("2.14.0.dev20260101+cpu")
    with pytest.raises(ConfigError, match="not a release"):
        torch_tag("2.14.0a0+gitabc123")


def test_fetches_only_test_at_the_installed_tag(upstream: str, tmp_path: Path) -> None:
    test_dir = fetch_tests(repo_url=upstream, cache_dir=tmp_path)
    checkout = tmp_path / INSTALLED
    assert test_dir == checkout / "test"
    assert (test_dir / "test_ops.py").read_text() == "RELEASE = 'installed'\n"
    assert (test_dir / "nn" / "test_convolution.py").exists()
    # Sparse: nothing outside test/ is in the work tree.
    assert sorted(p.name for p in checkout.iterdir()) == sorted([".git", MARKER, "test"])
    # Shallow: one commit of history; partial: blobs outside test/ never came over.
    assert _git(checkout, "rev-list", "--count", "HEAD") == "1"
    missing = _git(checkout, "rev-list", "--objects", "--missing=print", "HEAD")
    assert any(line.startswith("?") for line in missing.splitlines())
    marker = json.loads((checkout / MARKER).read_text())
    assert marker["tag"] == INSTALLED and marker["repo_url"] == upstream
    assert marker["commit"] == _git(checkout, "rev-parse", "HEAD")
    # No partial folders left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == [INSTALLED]


def test_cached_checkout_is_reused_without_git(
    upstream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = fetch_tests(repo_url=upstream, cache_dir=tmp_path)
    (first / "local_note.txt").write_text("kept")
    monkeypatch.setenv("PATH", "")  # git can no longer be found: reuse must not need it
    again = fetch_tests(INSTALLED, repo_url="file:///nonexistent", cache_dir=tmp_path)
    assert again == first
    assert (again / "local_note.txt").read_text() == "kept"


def test_checkout_with_another_tag_is_refreshed(upstream: str, tmp_path: Path) -> None:
    test_dir = fetch_tests(repo_url=upstream, cache_dir=tmp_path)
    marker = test_dir.parent / MARKER
    marker.write_text(json.dumps({"tag": "v2.12.0"}))
    (test_dir / "test_ops.py").write_text("TAMPERED\n")
    assert fetch_tests(repo_url=upstream, cache_dir=tmp_path) == test_dir
    assert (test_dir / "test_ops.py").read_text() == "RELEASE = 'installed'\n"
    assert checkout_tag(test_dir.parent) == INSTALLED


def test_interrupted_checkout_without_marker_is_fetched_again(
    upstream: str, tmp_path: Path
) -> None:
    test_dir = fetch_tests(repo_url=upstream, cache_dir=tmp_path)
    (test_dir.parent / MARKER).unlink()
    shutil.rmtree(test_dir / "nn")
    fetch_tests(repo_url=upstream, cache_dir=tmp_path)
    assert (test_dir / "nn" / "test_convolution.py").exists()


def test_tag_other_than_the_installed_torch_is_refused(upstream: str, tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"--tag: tag v2\.12\.0 does not match the installed torch"
    ):
        fetch_tests("v2.12.0", repo_url=upstream, cache_dir=tmp_path)
    assert not (tmp_path / "v2.12.0").exists()


def test_missing_tag_is_a_clear_error(
    upstream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A development build has no installed tag, so any tag may be asked for.
    monkeypatch.setattr(torch, "__version__", "2.14.0a0+gitabc123")
    with pytest.raises(ConfigError, match=r"tag v9\.9\.9 does not exist in file://"):
        fetch_tests("v9.9.9", repo_url=upstream, cache_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # the partial checkout was removed
    # ...and an older tag fetches fine there.
    assert (
        fetch_tests("v2.12.0", repo_url=upstream, cache_dir=tmp_path) / "test_ops.py"
    ).read_text() == ("OLD = True\n")
    with pytest.raises(ConfigError, match="has no upstream tag"):
        fetch_tests(repo_url=upstream, cache_dir=tmp_path)


def test_missing_git_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="git is not installed"):
        fetch_tests(repo_url="file:///nowhere", cache_dir=tmp_path)


def test_unreachable_repository_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"git fetch failed for file:///nonexistent/repo"):
        fetch_tests(repo_url="file:///nonexistent/repo", cache_dir=tmp_path / "cache")


def test_invalid_tags_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.14.0a0+gitabc123")
    for tag in ("--upload-pack=evil", "../escape", "v1:refs/heads/x", ""):
        with pytest.raises(ConfigError, match="invalid tag"):
            fetch_tests(tag, repo_url="file:///nowhere", cache_dir=tmp_path)


def test_a_folder_not_created_by_fetch_is_never_deleted(upstream: str, tmp_path: Path) -> None:
    foreign = tmp_path / INSTALLED
    foreign.mkdir()
    (foreign / "precious.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not created by `conformance fetch`"):
        fetch_tests(repo_url=upstream, cache_dir=tmp_path)
    assert (foreign / "precious.txt").read_text() == "mine"


def test_cache_root_from_the_environment(
    upstream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(fetch.CACHE_ENV, str(tmp_path / "env-cache"))
    assert fetch_tests(repo_url=upstream) == tmp_path / "env-cache" / INSTALLED / "test"
    monkeypatch.delenv(fetch.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert fetch.default_cache_root() == tmp_path / "xdg" / "torch-conformance" / "pytorch-test"


def test_verify_checkout_refuses_tests_fetched_for_another_torch(
    upstream: str, tmp_path: Path
) -> None:
    test_dir = fetch_tests(repo_url=upstream, cache_dir=tmp_path)
    verify_checkout(test_dir)  # matches: no error
    (test_dir.parent / MARKER).write_text(json.dumps({"tag": "v2.12.0"}))
    with pytest.raises(ConfigError, match=r"fetched at v2\.12\.0 but the installed torch"):
        verify_checkout(test_dir)
    plain = tmp_path / "my-pytorch" / "test"
    plain.mkdir(parents=True)
    verify_checkout(plain)  # a user's own folder has no marker: accepted


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="conformance")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def test_fetch_command(upstream: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["fetch", "--repo-url", upstream, "--cache-dir", str(tmp_path)])
    assert args.handler(args) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / INSTALLED / "test")


def test_fetch_command_errors_are_config_errors(upstream: str, tmp_path: Path) -> None:
    args = _parser().parse_args(
        ["fetch", "--tag", "v2.12.0", "--repo-url", upstream, "--cache-dir", str(tmp_path)]
    )
    with pytest.raises(ConfigError) as info:
        args.handler(args)
    assert info.value.exit_code == 2


MIRROR_SCRIPT = Path(__file__).resolve().parents[3] / "shared" / "upstream" / "mirror"


@pytest.mark.skipif(not MIRROR_SCRIPT.is_file(), reason=f"no upstream mirror at {MIRROR_SCRIPT}")
@pytest.mark.skipif(INSTALLED != "v2.13.0", reason="the mirror holds torch 2.13's test files")
def test_fetch_lists_the_files_a_run_selects_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mirror = tmp_path / "pytorch-mirror"
    subprocess.run([str(MIRROR_SCRIPT), str(mirror)], check=True, capture_output=True)
    argv = ["fetch", "--repo-url", str(mirror), "--cache-dir", str(tmp_path / "cache")]
    args = _parser().parse_args([*argv, "--list-files"])
    assert args.handler(args) == 0
    out, err = capsys.readouterr()
    listed = out.splitlines()
    assert len(listed) == 13 and listed == sorted(listed)
    assert {"test_ops.py", "test_ops_gradients.py", "test_scatter_gather_ops.py"} <= set(listed)
    assert f"13 device-generic files in {tmp_path / 'cache' / INSTALLED / 'test'}" in err
