"""``conformance nightly``: the nightly pipeline, step by step, as CI and a local rehearsal run it.

The nightly workflow (``.github/workflows/nightly.yml``) runs the same two steps as
``conformance nightly rehearse`` (``nox -s nightly``) does on one machine:

``shard K/N``
    One CI machine: shard K of N of the selection on the device (each mode), balanced by
    the durations of the last nightly in the history (the device's and cpu's runs), then
    the baseline on demand: the shard's tests that did not pass on the device in any mode,
    run on cpu (``conformance run --baseline-for``). Writes ``<runs>/<device>-shard-K``
    (``<device>-compile-shard-K``) and ``<runs>/cpu-shard-K``.
``finish --shards N``
    After the matrix: merges each device's shards into one run in the history, joins the
    device run with the cpu run by test_id, writes the op coverage snapshot and triage,
    and renders the report with trends over the history (with ``--claims FILE``, each
    mode's report checks the feature matrix against the backend's claims). Exit 0 when
    every outcome of the merged device run was expected and no claim differs, 1 otherwise.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path

from conformance.errors import ConfigError
from conformance.retry import DEFAULT_RETRY_CAP, retry_cap

__all__ = ["finish", "register", "run_shard"]

BASELINE_DEVICE = "cpu"
#: Prefix of the merged runs in the history: nightly-<stamp>-<device>.
NIGHTLY_PREFIX = "nightly-"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "nightly",
        help="the nightly pipeline: shards on the device and on cpu, merged, joined, reported",
        description="Run the nightly pipeline's steps: 'shard K/N' on each CI machine, "
        "'finish' once they are done, or 'rehearse' to run them all on this machine.",
    )
    steps = parser.add_subparsers(dest="step", metavar="STEP", required=True)

    def common(step: argparse.ArgumentParser) -> None:
        step.add_argument("--device", default="emu", metavar="TYPE", help="default: emu")
        step.add_argument("--runs-root", default="runs", metavar="DIR", help="shard runs")
        step.add_argument(
            "--history", default="history", metavar="DIR", help="merged nightly runs (trends)"
        )
        step.add_argument(
            "--modes",
            default="eager,compile",
            metavar="LIST",
            help="execution modes of the device's runs (default: eager,compile; cpu runs eager)",
        )

    def selection(step: argparse.ArgumentParser) -> None:
        step.add_argument(
            "--suite", default="embedded:smoke", metavar="NAME", help="default: embedded:smoke"
        )
        step.add_argument("--files", nargs="+", metavar="NAME_OR_GLOB", help="files to run")
        step.add_argument("-n", "--workers", default="auto", metavar="N", help="xdist workers")
        step.add_argument(
            "--retry-failures",
            type=retry_cap,
            default=DEFAULT_RETRY_CAP,
            metavar="N",
            help="retry each run's failed tests once in a fresh process, at most N per run "
            f"(default: {DEFAULT_RETRY_CAP}; 0: no retries): one that passes is flaky",
        )
        step.add_argument(
            "run_args", nargs="*", metavar="-- RUN_ARGS", help="passed on to conformance run"
        )

    def finishing(step: argparse.ArgumentParser) -> None:
        step.add_argument("--report", default="report", metavar="DIR", help="default: report")
        step.add_argument("--run-id", metavar="ID", help="merged run id (default: time)")
        step.add_argument(
            "--claims",
            metavar="FILE",
            help="the backend's claimed feature statuses (backend/features.toml for emu), "
            "passed to each mode's report: a claim that differs makes the exit code 1",
        )

    shard = steps.add_parser("shard", help="one machine's shard on the device and on cpu")
    shard.add_argument("shard", metavar="K/N")
    common(shard)
    selection(shard)
    shard.set_defaults(handler=_shard_command)

    done = steps.add_parser("finish", help="merge, join, triage and report the shards")
    done.add_argument("--shards", type=int, required=True, metavar="N")
    common(done)
    finishing(done)
    done.set_defaults(handler=_finish_command)

    rehearse = steps.add_parser("rehearse", help="every shard, then finish, on this machine")
    rehearse.add_argument("--shards", type=int, default=2, metavar="N", help="default: 2")
    common(rehearse)
    selection(rehearse)
    finishing(rehearse)
    rehearse.set_defaults(handler=_rehearse_command)

    from conformance import plan

    plan.register(steps)


def _conformance(argv: list[str]) -> int:
    from conformance.cli import main

    print(f"conformance nightly: conformance {' '.join(argv)}", flush=True)
    return main(argv)


def _last_nightly(history: Path, device: str, mode: str = "eager") -> Path | None:
    """The newest merged nightly run of ``device`` in ``mode`` in the history, if any."""
    from conformance.store import list_runs

    if not history.is_dir():
        return None
    runs = [
        meta
        for meta in list_runs(history)
        if meta.backend == device
        and (meta.mode or "eager") == mode
        and meta.run_id.startswith(NIGHTLY_PREFIX)
    ]
    return history / runs[-1].run_id if runs else None


def run_shard(
    shard: str,
    *,
    device: str,
    suite: str,
    runs_root: Path,
    history: Path,
    workers: str = "auto",
    files: list[str] | None = None,
    run_args: list[str] | None = None,
    modes: tuple[str, ...] = ("eager",),
    retry_failures: int = DEFAULT_RETRY_CAP,
) -> int:
    """Shard ``K/N`` on ``device`` in each of ``modes``, then on cpu (eager) the shard's
    tests that did not pass on the device (the baseline on demand; the whole shard when the
    device is cpu). Returns 0 when all ran (their unexpected outcomes are a result for
    ``finish`` to judge), else the first failing exit code. Each run retries up to
    ``retry_failures`` of its failed tests."""
    index, _, count = shard.partition("/")
    if not (index.isdigit() and count.isdigit() and 1 <= int(index) <= int(count)):
        raise ConfigError(f"expected K/N with 1 <= K <= N, got {shard!r}", where="shard")
    durations: list[str] = []
    for which in (device, BASELINE_DEVICE):
        last = _last_nightly(history, which)
        if last is not None:
            durations += ["--shard-durations", str(last)]
    jobs = [(device, mode) for mode in modes]
    if device != BASELINE_DEVICE or "eager" not in modes:
        jobs.append((BASELINE_DEVICE, "eager"))
    for which, mode in jobs:
        argv = ["run", "--device", which, "--suite", suite, "-n", workers, "--mode", mode]
        argv += ["--files", *files] if files else []
        if which == device or device == BASELINE_DEVICE:
            argv += ["--shard", shard, *durations]
        else:  # the baseline on demand of the device's runs of this shard
            for run_mode in modes:
                argv += ["--baseline-for", str(runs_root / _shard_run(device, run_mode, index))]
        argv += ["--runs-root", str(runs_root), "--run-id", _shard_run(which, mode, index)]
        argv += ["--retry-failures", str(retry_failures)]
        # Ops are traced eager: torch.compile cannot run under the tracing dispatch mode.
        argv += ["--trace-ops"] if which == device and mode == "eager" else []
        code = _conformance([*argv, *(run_args or [])])
        if code not in (0, 1):
            return code
    return 0


def _shard_run(device: str, mode: str, index: int | str) -> str:
    """A shard run's id: ``emu-shard-1``, and ``emu-compile-shard-1`` in compile mode."""
    return f"{device}-shard-{index}" if mode == "eager" else f"{device}-{mode}-shard-{index}"


def parse_modes(text: str) -> tuple[str, ...]:
    """``"eager,compile"`` -> the modes, checked."""
    modes = tuple(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    bad = [m for m in modes if m not in ("eager", "compile")]
    if bad or not modes:
        raise ConfigError(f"expected modes among eager, compile, got {text!r}", where="--modes")
    return modes


def finish(
    shards: int,
    *,
    device: str,
    runs_root: Path,
    history: Path,
    report: Path,
    run_id: str | None = None,
    modes: tuple[str, ...] = ("eager",),
    claims: Path | None = None,
) -> int:
    """Merge, join, snapshot, triage and report, each mode's run; the worst verdict of the
    device's runs (1 too when a report finds a claim of ``claims`` that differs). The eager
    report goes to ``report``, the compile report (joined with the eager run by
    ``--modes``) to ``report/compile``."""
    from conformance.run_cli import join_baseline, judge
    from reports.claims import load_claims

    if shards < 1:
        raise ConfigError(f"expected at least 1 shard, got {shards}", where="--shards")
    if claims is not None:
        load_claims(claims)  # a bad file stops here, before any merge
    stamp = run_id or _stamp()
    jobs = list(dict.fromkeys([*((device, mode) for mode in modes), (BASELINE_DEVICE, "eager")]))
    shard_runs = {
        job: [runs_root / _shard_run(*job, k) for k in range(1, shards + 1)] for job in jobs
    }
    missing = [
        p.name for parts in shard_runs.values() for p in parts if not (p / "meta.json").is_file()
    ]
    if missing:
        raise ConfigError(f"shard runs missing: {', '.join(missing)}", where=str(runs_root))
    merged: dict[tuple[str, str], Path] = {}
    for (which, mode), parts in shard_runs.items():
        target = f"{NIGHTLY_PREFIX}{stamp}-{which}" + ("" if mode == "eager" else f"-{mode}")
        code = _conformance(
            ["merge", *map(str, parts), "--runs-root", str(history), "--run-id", target]
        )
        if code != 0:
            return code
        merged[(which, mode)] = history / target
    baseline = merged[(BASELINE_DEVICE, "eager")]
    verdicts = []
    for mode in modes:
        run_dir = merged[(device, mode)]
        out = report if mode == "eager" else report / mode
        if device != BASELINE_DEVICE:
            join_baseline(run_dir, baseline, BASELINE_DEVICE)
        extra = ["--baseline", str(baseline)] if device != BASELINE_DEVICE else []
        if mode != "eager" and (device, "eager") in merged:
            extra += ["--modes", str(merged[(device, "eager")])]
        extra += ["--claims", str(claims)] if claims is not None else []
        for step in (
            ["ops", "snapshot", str(run_dir)],
            ["ops", "triage", str(run_dir), "--top", "20"],
        ):
            code = _conformance(step)
            if code != 0:
                return code
        report_step = ["report", str(run_dir), "--out", str(out), "--history", str(history)]
        reported = _conformance([*report_step, *extra])
        if reported not in (0, 1):  # 1: a claim differs, a verdict like an unexpected outcome
            return reported
        print(f"conformance nightly: {mode} report: {out / 'index.html'}")
        verdicts.append(max(reported, judge(run_dir)))
    return max(verdicts)


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")


def _shard_command(args: argparse.Namespace) -> int:
    return run_shard(
        args.shard,
        device=args.device,
        suite=args.suite,
        runs_root=Path(args.runs_root),
        history=Path(args.history),
        workers=args.workers,
        files=args.files,
        run_args=args.run_args,
        modes=parse_modes(args.modes),
        retry_failures=args.retry_failures,
    )


def _finish_command(args: argparse.Namespace) -> int:
    return finish(
        args.shards,
        device=args.device,
        runs_root=Path(args.runs_root),
        history=Path(args.history),
        report=Path(args.report),
        run_id=args.run_id,
        modes=parse_modes(args.modes),
        claims=Path(args.claims) if args.claims else None,
    )


def _rehearse_command(args: argparse.Namespace) -> int:
    # Each rehearsal's shard runs in a folder of its own, as each CI machine starts empty.
    stamp = args.run_id or _stamp()
    args = argparse.Namespace(**{**vars(args), "runs_root": str(Path(args.runs_root) / stamp)})
    args.run_id = stamp
    for k in range(1, args.shards + 1):
        code = _shard_command(argparse.Namespace(**{**vars(args), "shard": f"{k}/{args.shards}"}))
        if code != 0:
            return code
    return _finish_command(args)
