"""The project's task definitions: CI and the README call only these sessions.

Every session installs the same stack: torch from ``constraints.txt`` (a CPU build, so
pip never resolves a CUDA one), the harness, and the ``emu`` backend built against that
torch without build isolation. The backend build is skipped when its sources have not
changed since the last build in the same virtualenv.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import nox
from nox.command import CommandFailed

nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"
nox.options.sessions = ["lint", "tests"]

ROOT = Path(__file__).parent
BACKEND = ROOT / "backend"
RUNS = ROOT / "runs"
REPORT = ROOT / "report"
#: emu's claimed feature statuses, which the main job's report checks.
CLAIMS = BACKEND / "features.toml"
#: Where `nox -s upstream` keeps its checkouts of PyTorch's test/.
UPSTREAM_CACHE = ROOT / ".upstream-cache"


def _backend_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(BACKEND.rglob("*")):
        generated = {"build", "__pycache__"}.intersection(path.relative_to(BACKEND).parts)
        skipped = bool(generated) or path == CLAIMS  # emu's claims are no part of the build
        if path.is_file() and not skipped and path.suffix in {".py", ".cpp", ".h", ".toml"}:
            digest.update(str(path.relative_to(BACKEND)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def install_stack(session: nox.Session) -> None:
    """Install torch (CPU), the harness with its test extras, and the emu backend."""
    session.install("-c", "constraints.txt", "torch==2.13.0")
    session.install("-c", "constraints.txt", "setuptools>=68", "wheel", "ninja")
    session.install("-c", "constraints.txt", "-e", ".[test]")
    stamp = Path(session.virtualenv.location) / ".emu-build-digest"
    digest = _backend_digest()
    if not stamp.exists() or stamp.read_text() != digest:
        session.install("--no-build-isolation", "-c", "constraints.txt", "./backend")
        stamp.write_text(digest)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (pass pytest arguments after --)."""
    install_stack(session)
    args = session.posargs or ["-n", "2", "-q"]
    session.run("pytest", *args)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def conformance(session: nox.Session) -> None:
    """The main job: emu against the embedded suite's smoke selection, then the HTML report."""
    install_stack(session)
    args = session.posargs or [
        "--device", "emu", "--suite", "embedded:smoke", "-n", "2", "--trace-ops",
    ]  # fmt: skip
    # Exit 1 means unexpected outcomes: the report is what shows them.
    session.run("conformance", "run", "--runs-root", str(RUNS), *args, success_codes=[0, 1])
    latest = str(RUNS / "latest")
    session.run("conformance", "ops", "snapshot", latest)
    session.run("conformance", "ops", "triage", latest, "--top", "10")
    # emu states what it supports in backend/features.toml: the report checks its feature
    # matrix against those claims and exits 1 when one differs, which fails the job.
    claims = ["--claims", str(CLAIMS)] if _device(args) == "emu" else []
    session.run(
        "conformance", "report", latest, "--out", str(REPORT), "--history", str(RUNS), *claims
    )  # fmt: skip
    session.log(f"report: {REPORT / 'index.html'}")


def _device(args: list[str]) -> str:
    """The ``--device`` of a ``conformance run`` command line ("" when it names none)."""
    options = args[: args.index("--")] if "--" in args else args
    for index, arg in enumerate(options):
        if arg == "--device" and index + 1 < len(options):
            return options[index + 1]
        if arg.startswith("--device="):
            return arg.partition("=")[2]
    return ""


@nox.session
def nightly(session: nox.Session) -> None:
    """Rehearse the nightly pipeline here: N shards of a selection on emu and on cpu,
    merged, joined, triaged and reported with trends, as .github/workflows/nightly.yml
    runs it (arguments after -- go to `conformance nightly rehearse`)."""
    install_stack(session)
    args = session.posargs or ["--shards", "2", "--suite", "embedded:smoke", "-n", "2"]
    root = ROOT / "nightly"
    session.run(
        "conformance", "nightly", "rehearse",
        "--runs-root", str(root / "runs"), "--history", str(root / "history"),
        "--report", str(root / "report"), *args,
        success_codes=[0, 1],  # 1: unexpected outcomes, which the report shows
    )  # fmt: skip


@nox.session
def upstream(session: nox.Session) -> None:
    """emu on PyTorch's own test files at the installed torch's tag, with emu's lists (the
    common layer and emu's upstream list): `conformance fetch` (from --repo-url URL when
    given first, else PyTorch's repository), then `conformance run --upstream` of the default
    selection; other arguments after -- go to the run (default: --shard 1/200 -n 2)."""
    install_stack(session)
    args = list(session.posargs)
    fetch = ["conformance", "fetch"]
    if args[:1] == ["--repo-url"]:
        fetch += args[:2]
        args = args[2:]
    env = {"CONFORMANCE_CACHE_DIR": str(UPSTREAM_CACHE)}
    session.run(*fetch, "--list-files", env=env)
    run = ["conformance", "run", "--device", "emu", "--upstream", "--runs-root", str(RUNS)]
    session.run(*run, *(args or ["--shard", "1/200", "-n", "2"]), env=env)


@nox.session
def report(session: nox.Session) -> None:
    """Render the report of a run (default: the latest under runs/)."""
    install_stack(session)
    run_dir = session.posargs[0] if session.posargs else str(RUNS / "latest")
    session.run("conformance", "report", run_dir, "--out", str(REPORT))


@nox.session
def bench(session: nox.Session) -> None:
    """Run every benchmark under bench/ (each prints ratios measured side by side)."""
    install_stack(session)
    names = session.posargs or sorted(p.stem for p in (ROOT / "bench").glob("*.py"))
    failed = []
    for name in names:
        # A missed target (exit 1) or a broken benchmark fails the session, but only after
        # every benchmark has run and printed its ratios.
        try:
            session.run("python", f"bench/{name}.py")
        except CommandFailed as exc:
            failed.append(f"{name} (exit {exc.return_code})")
    if failed:
        session.error(f"benchmarks that missed a target or failed: {', '.join(failed)}")
