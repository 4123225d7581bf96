"""Fetch PyTorch's upstream ``test/`` folder at the tag of the installed torch.

The checkout is shallow (``--depth 1``) and sparse (only ``test/``), kept in a cache folder
per tag and reused when present. A marker file beside ``test/`` records the tag it was
checked out at; a checkout whose marker is missing or names another tag is fetched again,
and a tag that does not match the installed torch is refused, so upstream tests never run
against a torch they were not written for.

Cache root precedence: the ``cache_dir`` argument (``--cache-dir``), then the
``CONFORMANCE_CACHE_DIR`` environment variable, then
``$XDG_CACHE_HOME/torch-conformance/pytorch-test`` (``~/.cache/...`` without XDG).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from conformance.errors import ConfigError

__all__ = [
    "CACHE_ENV",
    "DEFAULT_REPO_URL",
    "MARKER",
    "checkout_tag",
    "default_cache_root",
    "fetch_tests",
    "register",
    "torch_tag",
    "verify_checkout",
]

DEFAULT_REPO_URL = "https://github.com/pytorch/pytorch.git"
#: Environment variable naming the cache root.
CACHE_ENV = "CONFORMANCE_CACHE_DIR"
#: Written beside ``test/`` once a checkout is complete.
MARKER = ".torch-conformance-fetch.json"

# A release or release-candidate version: 2.13.0, 2.13.0+cpu, 2.13.0rc2.
_RELEASE = re.compile(r"^(?P<base>\d+\.\d+\.\d+)(?:rc(?P<rc>\d+))?(?:\+[\w.]+)?$")
_TAG = re.compile(r"^[A-Za-z0-9][\w.+-]*$")
_GIT_TIMEOUT_S = 1800  # a first fetch of test/ over a slow link; cached afterwards


def torch_tag(version: str | None = None) -> str:
    """The upstream git tag of a torch version (the installed one by default).

    ``2.13.0+cpu`` -> ``v2.13.0``; ``2.13.0rc2`` -> ``v2.13.0-rc2``. A development or
    nightly build has no release tag: ConfigError, naming the version.
    """
    if version is None:
        import torch

        version = torch.__version__
    match = _RELEASE.match(str(version))
    if match is None:
        raise ConfigError(
            f"torch {version} is not a release, so it has no upstream tag to fetch tests at; "
            "pass the path of a PyTorch test/ folder that matches this build instead"
        )
    rc = f"-rc{match['rc']}" if match["rc"] else ""
    return f"v{match['base']}{rc}"


def default_cache_root() -> Path:
    """Where checkouts live when no cache folder is given (see the module docstring)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "torch-conformance" / "pytorch-test"


def checkout_tag(checkout: Path) -> str | None:
    """The tag recorded in a checkout's marker (the folder holding ``test/``), or None."""
    try:
        data = json.loads((Path(checkout) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    tag = data.get("tag") if isinstance(data, dict) else None
    return tag if isinstance(tag, str) else None


def verify_checkout(test_dir: Path) -> None:
    """Refuse a fetched ``test/`` folder whose recorded tag differs from the installed torch.

    Folders without a marker (a user's own checkout) are accepted as they are, and so is
    any fetched tag when the installed torch is a development build.
    """
    recorded = checkout_tag(Path(test_dir).parent)
    installed = _installed_tag()
    # A development build has no tag to compare with: the user chose the tag to fetch.
    if recorded is not None and installed is not None and recorded != installed:
        raise ConfigError(
            f"tests were fetched at {recorded} but the installed torch is {_torch_version()} "
            f"({installed}); run `conformance fetch` to fetch matching tests",
            where=str(test_dir),
        )


def fetch_tests(
    tag: str | None = None,
    *,
    repo_url: str = DEFAULT_REPO_URL,
    cache_dir: Path | None = None,
) -> Path:
    """The ``test/`` folder of PyTorch at ``tag``, fetched unless a complete checkout exists.

    ``tag`` defaults to :func:`torch_tag`; a different tag is refused (ConfigError) when
    the installed torch is a release. Returns ``<cache root>/<tag>/test``. Raises
    ConfigError when git is missing, the tag does not exist at ``repo_url``, the fetch
    fails, or the cache holds a folder this command did not create.
    """
    installed = _installed_tag()
    if tag is None:
        if installed is None:
            torch_tag()  # raises the explanation
        tag = installed
    tag = tag.strip()
    if not _TAG.match(tag) or ".." in tag:
        # The tag names a cache folder and a refspec: no separators, no option look-alikes.
        raise ConfigError(f"invalid tag {tag!r}", where="--tag")
    if installed is not None and tag != installed:
        raise ConfigError(
            f"tag {tag} does not match the installed torch {_torch_version()} ({installed}); "
            "tests must come from the release they run against",
            where="--tag",
        )

    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    checkout = root / tag
    if _complete(checkout, tag):
        return checkout / "test"
    git = shutil.which("git")
    if git is None:
        raise ConfigError(
            "git is not installed; it is needed to fetch PyTorch's tests "
            "(or pass the path of a PyTorch test/ folder)"
        )
    _discard_stale(checkout)
    root.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{tag}.partial-", dir=root))
    try:
        commit = _checkout(git, repo_url, tag, partial)
        marker = {
            "tag": tag,
            "repo_url": repo_url,
            "commit": commit,
            "fetched_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        (partial / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")
        try:
            partial.rename(checkout)  # atomic: a checkout is either complete or absent
        except OSError:
            if not _complete(checkout, tag):  # another process won the race with a good one
                raise
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    return checkout / "test"


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def _installed_tag() -> str | None:
    try:
        return torch_tag()
    except ConfigError:
        return None


def _complete(checkout: Path, tag: str) -> bool:
    return checkout_tag(checkout) == tag and (checkout / "test").is_dir()


def _discard_stale(checkout: Path) -> None:
    """Remove an earlier checkout that is incomplete or at another tag; never a stranger's folder."""
    if not checkout.exists():
        return
    if not (checkout / MARKER).exists() and not (checkout / ".git").exists():
        raise ConfigError(
            "the cache folder exists but was not created by `conformance fetch`; "
            "remove it or choose another --cache-dir",
            where=str(checkout),
        )
    shutil.rmtree(checkout)


def _git(git: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ADVICE": "0"}
    try:
        return subprocess.run(
            [git, *args],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ConfigError(f"git {args[0]} took longer than {_GIT_TIMEOUT_S} s") from exc


def _checkout(git: str, repo_url: str, tag: str, into: Path) -> str:
    """Shallow, sparse checkout of ``test/`` at ``tag`` into ``into``; returns the commit."""
    steps: list[list[str]] = [
        ["init", "--quiet"],
        ["config", "core.sparseCheckout", "true"],
        ["remote", "add", "origin", repo_url],
    ]
    for args in steps:
        _must(_git(git, args, into), args, repo_url)
    # Only test/ is checked out; --filter keeps other blobs off the wire where the
    # server supports it (GitHub does; a local file:// remote ignores it).
    (into / ".git" / "info").mkdir(parents=True, exist_ok=True)
    (into / ".git" / "info" / "sparse-checkout").write_text("/test/\n", encoding="utf-8")
    fetch = [
        "fetch",
        "--quiet",
        "--depth",
        "1",
        "--filter=blob:none",
        "--no-tags",
        "origin",
        f"refs/tags/{tag}:refs/tags/{tag}",
    ]
    result = _git(git, fetch, into)
    if result.returncode != 0:
        if re.search(r"couldn't find remote ref|not our ref|no such ref", result.stderr, re.I):
            raise ConfigError(f"tag {tag} does not exist in {repo_url}", where="--tag")
        _must(result, fetch, repo_url)
    checkout = ["-c", "advice.detachedHead=false", "checkout", "--quiet", "--detach", tag]
    _must(_git(git, checkout, into), checkout, repo_url)
    if not (into / "test").is_dir():
        raise ConfigError(f"{repo_url} at {tag} has no test/ folder", where="--repo-url")
    head = _git(git, ["rev-parse", "HEAD"], into)
    _must(head, ["rev-parse", "HEAD"], repo_url)
    return head.stdout.strip()


def _must(result: subprocess.CompletedProcess[str], args: list[str], repo_url: str) -> None:
    if result.returncode != 0:
        message = (result.stderr or result.stdout).strip().splitlines()
        reason = message[-1] if message else f"exit status {result.returncode}"
        raise ConfigError(f"git {' '.join(args[:1])} failed for {repo_url}: {reason}")


def _fetch_command(args: argparse.Namespace) -> int:
    test_dir = fetch_tests(args.tag, repo_url=args.repo_url, cache_dir=args.cache_dir)
    if not args.list_files:
        print(test_dir)
        return 0
    from conformance.discovery import discover_upstream_files
    from conformance.listing import warn_module_name_clashes

    discovered = discover_upstream_files(test_dir)
    for name in discovered.files:
        print(name)
    # The list stays pipeable on stdout; what was left out, and why, goes to stderr.
    for name, entry in discovered.excluded:
        print(f"conformance fetch: excluded {name}: {entry.reason}", file=sys.stderr)
    warn_module_name_clashes(test_dir, discovered.files, "conformance fetch")
    print(
        f"conformance fetch: {len(discovered.files)} device-generic files in {test_dir}",
        file=sys.stderr,
    )
    return 0


def register(subparsers: Any) -> None:
    """Add ``conformance fetch [--tag TAG] [--repo-url URL] [--cache-dir DIR] [--list-files]``."""
    parser = subparsers.add_parser(
        "fetch",
        help="fetch PyTorch's test/ folder at the installed torch's tag",
        description=(
            "Shallow, sparse git checkout of PyTorch's test/ folder at the tag of the "
            "installed torch, cached and reused; prints the path of test/, or with "
            "--list-files the device-generic files a run selects by default."
        ),
    )
    parser.add_argument("--tag", default=None, help="git tag (default: the installed torch's)")
    parser.add_argument(
        "--repo-url",
        default=DEFAULT_REPO_URL,
        help=f"repository to fetch from ({DEFAULT_REPO_URL})",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help=f"cache root (default: ${CACHE_ENV}, else ~/.cache/torch-conformance/pytorch-test)",
    )
    parser.add_argument(
        "--list-files",
        action="store_true",
        help="print the files `run --upstream` selects by default (relative to test/) instead "
        "of the path of test/",
    )
    parser.set_defaults(handler=_fetch_command)
