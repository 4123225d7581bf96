"""``conformance skiplist lint|update|sweep|explain|import|export``.

Every subcommand loads the skiplist strictly first (``--skiplist FILE``, repeatable, in
layer order; default: the shipped files for ``--backend`` and the torch version), so a bad
file is exit code 2 with the file, line and field before anything else happens.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import sys
import tempfile
from collections import Counter
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

from conformance.errors import ConfigError
from skiplists.edit import SkiplistText, unified_diff
from skiplists.runs import RunFacts, collect_identities, merge_facts, read_run_facts
from skiplists.skiplist import (
    DATA_DIR,
    NOT_PRIVATEUSE1,
    Skiplist,
    common_paths,
    default_paths,
    load,
)

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add ``skiplist`` and its subcommands to the ``conformance`` command line."""
    parser = subparsers.add_parser("skiplist", help="lint, update, sweep and explain skiplists")
    commands = parser.add_subparsers(dest="skiplist_command", metavar="SUBCOMMAND", required=True)

    lint = commands.add_parser("lint", help="dead, over-matching, conflicting and stale entries")
    _common(lint)
    _tests(lint)
    lint.add_argument("--json", action="store_true", help="print the findings as JSON")
    lint.add_argument("--today", type=_date, help="date to check review dates against")
    lint.set_defaults(handler=_lint)

    update = commands.add_parser("update", help="add a run's unexpected failures, mark passes")
    _common(update)
    update.add_argument(
        "--from",
        dest="run",
        type=Path,
        action="append",
        required=True,
        metavar="RUN_DIR",
        help="a run (repeatable: runs that together cover the suite, e.g. every selection)",
    )
    update.add_argument(
        "--to",
        type=Path,
        metavar="FILE",
        help="file for new entries (default: the backend's base.toml)",
    )
    update.add_argument(
        "--prune", action="store_true", help="remove passing entries instead of marking them"
    )
    update.add_argument(
        "--review-days",
        type=int,
        default=90,
        metavar="N",
        help="review date of new entries, days from today (0: none)",
    )
    update.add_argument("--dry-run", action="store_true", help="print the diff, write nothing")
    update.add_argument(
        "--amend",
        action="append",
        type=Path,
        default=[],
        metavar="RERUN",
        help="a rerun of some of the run's tests (repeatable): their latest outcomes count",
    )
    update.set_defaults(handler=_update)

    sweep = commands.add_parser("sweep", help="run only the listed tests, propose removals")
    _common(sweep)
    _tests(sweep)
    sweep.add_argument(
        "--tiers",
        nargs="+",
        default=["deselect", "xfail", "skip"],
        choices=["deselect", "xfail", "skip"],
        help="entries to sweep",
    )
    sweep.add_argument(
        "--rootdir",
        type=Path,
        default=Path.cwd(),
        help="folder the nodeids are relative to (default: .)",
    )
    sweep.add_argument("--write", action="store_true", help="apply the removals")
    sweep.set_defaults(handler=_sweep)

    explain = commands.add_parser("explain", help="which entry applies to a test, and why")
    _common(explain)
    explain.add_argument("test", metavar="TEST", help="a nodeid or a test_id")
    explain.add_argument(
        "--from",
        dest="run",
        type=Path,
        metavar="RUN_DIR",
        help="also say what happened to the test in this run: its outcome, the entry that "
        "applied and, for a cause entry, the cause the classifier read from its failure",
    )
    explain.set_defaults(handler=_explain)

    imp = commands.add_parser("import", help="entries from PyTorch's skip mechanisms")
    _common(imp)
    imp.add_argument("--format", required=True, choices=["disabled-json", "test-configs"])
    imp.add_argument(
        "source",
        help="a disabled-tests JSON file, or MODULE with set_test_configs "
        "attributes op_overrides / op_allowlist / test_exclusions",
    )
    imp.add_argument(
        "--from",
        dest="run",
        type=Path,
        metavar="RUN_DIR",
        help="a run, to map test classes to files",
    )
    imp.add_argument("--to", type=Path, required=True, metavar="FILE", help="file to add to")
    imp.add_argument("--platform", default="", help="only keys for this platform (or all)")
    imp.add_argument("--tier", default="skip", choices=["deselect", "xfail", "skip"])
    imp.add_argument("--category", default="known_bug")
    imp.set_defaults(handler=_import)

    exp = commands.add_parser("export", help="PyTorch's disabled-tests JSON or test configs")
    _common(exp)
    exp.add_argument("--format", required=True, choices=["disabled-json", "test-configs"])
    exp.add_argument(
        "--from",
        dest="run",
        type=Path,
        metavar="RUN_DIR",
        help="expand every entry to the tests it selected in this run",
    )
    exp.add_argument("-o", "--output", type=Path, help="write here (default: stdout)")
    exp.set_defaults(handler=_export)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--skiplist",
        action="append",
        type=Path,
        default=[],
        metavar="FILE",
        help="skiplist file, repeatable, in layer order (default: shipped files)",
    )
    parser.add_argument("--backend", help="device type (default: the run's backend)")
    parser.add_argument("--torch", dest="torch_version", help="torch version (default: installed)")


def _tests(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="run",
        type=Path,
        action="append",
        default=[],
        metavar="RUN_DIR",
        help="a run (repeatable: runs that together cover the suite, e.g. every shard)",
    )
    parser.add_argument(
        "--tests",
        nargs="+",
        default=[],
        metavar="PATH",
        help="test paths to collect (with --device and the conformance plugin)",
    )
    parser.add_argument("--device", help="device for collecting and sweeping (default: --backend)")
    parser.add_argument(
        "pytest_args",
        nargs="*",
        metavar="-- PYTEST_ARGS",
        help="passed on to pytest when collecting or sweeping",
    )


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date (YYYY-MM-DD)") from None


def _context(args: argparse.Namespace) -> tuple[Skiplist, list[Path], RunFacts | None]:
    """The skiplist the arguments name, and the run when one is given."""
    runs = getattr(args, "run", None)
    amend = getattr(args, "amend", None)
    if amend:
        if not isinstance(runs, list) or len(runs) != 1:
            raise ConfigError("amends one base run: give one --from RUN", where="--amend")
        from conformance.store import read_amended
        from skiplists.runs import facts_from_frame

        facts = facts_from_frame(*read_amended(runs[0], amend))
    elif isinstance(runs, list):  # several runs that together cover a suite
        facts = merge_facts([read_run_facts(run) for run in runs]) if runs else None
    else:
        facts = read_run_facts(runs) if runs else None
    backend = args.backend or (facts.meta.backend if facts else "")
    if not backend:
        raise ConfigError("say which backend: --backend NAME (or --from RUN)", where="--backend")
    args.backend = backend
    torch_version = args.torch_version or (facts.meta.torch_version if facts else "")
    args.torch_version = torch_version or metadata.version("torch")
    # Given files stand for the backend's: the common layer applies under them, as in a run.
    if not args.skiplist:
        paths = default_paths(backend, args.torch_version)
    elif backend in NOT_PRIVATEUSE1:
        paths = list(args.skiplist)
    else:
        paths = [*common_paths(args.torch_version), *args.skiplist]
    # With a run, the entries that applied in its mode (eager or compile); without, all.
    mode = (facts.meta.mode or "eager") if facts else None
    return load(paths, backend=backend, torch_version=args.torch_version, mode=mode), paths, facts


def _identities(args: argparse.Namespace, facts: RunFacts | None) -> list[Any] | None:
    device = args.device or args.backend
    identities = list(facts.identities) if facts else []
    if args.tests:
        with tempfile.TemporaryDirectory(prefix="skiplist-collect-") as scratch:
            # The plugin opens a run even to collect: keep it out of the user's runs.
            collect_args = ["--device", device, "--no-skiplist", "--run-dir", f"{scratch}/run"]
            identities.extend(
                collect_identities(args.tests, [device], [*collect_args, *args.pytest_args])
            )
    return identities if (facts or args.tests) else None


def _lint(args: argparse.Namespace) -> int:
    from skiplists.lint import lint

    skiplist, paths, facts = _context(args)
    identities = _identities(args, facts)
    passing = facts.passing_ids() if facts else None
    preempted: Counter[str] = Counter()
    applied: Counter[str] = Counter()
    if facts:
        by_where = skiplist.by_where()
        for record in facts.records:
            entry = by_where.get(record["skip_entry"])
            if entry is not None and entry.tier == "xfail":
                applied[entry.where] += 1
                preempted[entry.where] += record["outcome"] == "skipped"
    # Only an entry none of whose tests ran is never exercised; some upstream skips under a
    # template-wide entry are normal.
    never_exercised = {w: n for w, n in preempted.items() if n and n == applied[w]}
    findings = lint(
        skiplist,
        identities or [],
        passing=passing,
        skipped_by_entry=never_exercised,
        today=args.today,
        known_ops=_known_ops(skiplist),
        lowered=_lowered_now(skiplist, args.backend),
    )
    if identities is None:
        findings = [f for f in findings if f.kind not in ("dead", "shadowed")]
    if args.json:
        print(json.dumps([f.__dict__ for f in findings], indent=2))
    else:
        for finding in findings:
            print(finding)
        checked = "" if identities is not None else " (no tests given: dead entries not checked)"
        print(
            f"{len(skiplist)} entries in {len(paths)} file(s), {len(findings)} finding(s){checked}",
            file=sys.stderr,
        )
    return 1 if findings else 0


def _update(args: argparse.Namespace) -> int:
    from skiplists.update import apply_plan, plan_update

    skiplist, _paths, facts = _context(args)
    assert facts is not None
    today = dt.date.today()
    plan = plan_update(
        skiplist,
        facts,
        today=today,
        review_days=args.review_days,
        lowered=_lowered_now(skiplist, args.backend),
    )
    target = args.to or DATA_DIR / args.backend / "base.toml"
    changes = apply_plan(plan, target, prune=args.prune, today=today)
    _write_or_show(changes, write=not args.dry_run, show=args.dry_run)
    added = plan.failures
    causes = sum("cause" in entry for entry in plan.additions)
    done = "removed or trimmed" if args.prune else "marked"
    print(
        f"{added} failing test(s) added in {len(plan.additions)} entr(y/ies) to {target} "
        f"({causes} by cause, {len(plan.additions) - causes} by test); "
        f"{len(plan.passing)} entr(y/ies) with passing tests {done}; "
        f"{len(plan.stale)} stale cause entr(y/ies) {done}",
        file=sys.stderr,
    )
    for stale in plan.stale:
        print(f"{stale.entry.where}: cause {stale.entry.cause}: {stale.why}", file=sys.stderr)
    if plan.flaky:
        shown = ", ".join(plan.flaky[:5]) + (" ..." if len(plan.flaky) > 5 else "")
        print(
            f"{len(plan.flaky)} flaky test(s) (failed, then passed on a retry) not added: {shown}",
            file=sys.stderr,
        )
    return 0


def _known_ops(skiplist: Skiplist) -> set[str] | None:
    """The installed torch's ATen overloads, when the skiplist has missing-lowering causes
    to check against them."""
    if not any(e.category == "missing_lowering" for e in skiplist.causes):
        return None
    from op_coverage.dispatcher import aten_overloads

    return set(aten_overloads())


def _lowered_now(skiplist: Skiplist, backend: str) -> dict[str, str]:
    """Overloads of the skiplist's missing-lowering causes that the backend's static op
    table says are natively lowered now, with the kind of lowering; {} when the backend cannot be loaded
    here (then said on stderr)."""
    wanted = {e.detail for e in skiplist.causes if e.category == "missing_lowering"}
    if not wanted:
        return {}
    from conformance.errors import ConformanceError
    from op_coverage.static import load_static_table

    try:
        table = load_static_table(backend)
    except ConformanceError as exc:
        print(f"note: lowered causes not checked: {exc}", file=sys.stderr)
        return {}
    # Only a native lowering counts: a composite kernel still needs the ops it calls.
    return {
        op: f"native {row.kind}".strip()
        for op in wanted
        if (row := table.ops.get(op)) is not None and row.status == "native"
    }


def _sweep(args: argparse.Namespace) -> int:
    from skiplists.sweep import selected_nodeids, sweep

    skiplist, _paths, facts = _context(args)
    identities = _identities(args, facts)
    if identities is None:
        raise ConfigError("say which tests: --from RUN or --tests PATH", where="sweep")
    records = facts.records if facts else []
    nodeids = selected_nodeids(skiplist, identities, args.tiers, records)
    causes = {entry.where for entry in skiplist.causes}
    result = sweep(
        skiplist,
        nodeids,
        device=args.device or args.backend,
        rootdir=args.rootdir,
        pytest_args=args.pytest_args,
        today=dt.date.today(),
        swept_causes={str(r.get("skip_entry")) for r in records} & causes,
    )
    _write_or_show(result.changes, write=args.write, show=True)
    print(
        f"swept {len(nodeids)} test(s): {len(result.plan.passing)} entr(y/ies) with passing "
        f"tests, {len(result.plan.stale)} cause entr(y/ies) whose tests no longer fail of it",
        file=sys.stderr,
    )
    return 0


def _explain(args: argparse.Namespace) -> int:
    from conformance.identity import parse_nodeid
    from skiplists.upstream import with_device

    skiplist, _paths, facts = _context(args)
    identity = parse_nodeid(args.test, [args.backend])
    parts = args.test.split("::")
    if identity.test_id == args.test and len(parts) == 3:
        # A test_id: put the device back so the name parses into its structured fields.
        file, test_class, name = parts
        nodeid = f"{file}::{test_class}{args.backend.upper()}::{with_device(name, args.backend)}"
        identity = parse_nodeid(nodeid, [args.backend])
    print(f"test_id: {identity.test_id}")
    fields = {k: v for k, v in asdict(identity).items() if v and k not in ("nodeid", "test_id")}
    print("fields:  " + " ".join(f"{k}={v}" for k, v in fields.items()))
    if facts is not None:
        known = {i.test_id: i for i in facts.identities}
        identity = known.get(identity.test_id, identity)  # the run's own structured fields
    hits = skiplist.match_all(identity)
    if not hits:
        print("no entry applies at collection: the test runs")
    for position, entry in enumerate(hits):
        verdict = "APPLIES" if position == 0 else "outranked"
        ids = entry.selector.test_ids
        shown = (
            f"{identity.test_id} (one of {len(ids)})" if len(ids) > 1 else entry.selector.describe()
        )
        print(f"{verdict}: {entry.where}  [{entry.selector.kind}] {shown}")
        print(
            f"    tier={entry.tier} category={entry.category}"
            + (f" detail={entry.detail}" if entry.detail else "")
        )
        print(f"    reason: {entry.reason}")
        for label, value in (
            ("link", entry.link),
            ("owner", entry.owner),
            ("review", entry.review),
        ):
            if value:
                print(f"    {label}: {value}")
    causes = skiplist.causes_for(identity)
    if causes and not hits:
        print("cause entries that make a failure of it expected, if it fails of their cause:")
        for entry in causes:
            print(f"    {entry.where}  cause {entry.cause}: {entry.reason}")
    if facts is not None:
        _explain_record(skiplist, identity, facts)
    return 0


def _explain_record(skiplist: Skiplist, identity: Any, facts: RunFacts) -> None:
    """What the run recorded for the test, and which entry applied, by which reading."""
    record = next((r for r in facts.records if r["test_id"] == identity.test_id), None)
    run = facts.meta.run_id
    if record is None:
        print(f"in run {run}: not recorded")
        return
    detail = f" {record['detail']}" if record["detail"] else ""
    print(f"in run {run}: {record['outcome']} ({record['category'] or 'no category'}{detail})")
    applied = skiplist.by_where().get(str(record.get("skip_entry") or ""))
    message = next((ln for ln in str(record["message"]).splitlines() if ln.strip()), "")
    if applied is not None and applied.is_cause:
        print(f"    cause entry {applied.where} applied: the classifier read {applied.category}")
        print(f"    {applied.detail} from the failure: {message}")
    elif applied is not None:
        print(f"    entry {applied.where} applied at collection (tier {applied.tier})")
    elif record.get("skip_entry"):
        print(f"    entry {record['skip_entry']} applied; it is not in the skiplist loaded here")
    elif record["outcome"] in ("failed", "error"):
        from skiplists.update import has_cause, infer_category

        category, detail = infer_category(record)
        readable = "a cause an entry can name" if has_cause(category, detail) else "no cause"
        print(f"    the classifier read {category} {detail}".rstrip() + f" ({readable}): {message}")


def _import(args: argparse.Namespace) -> int:
    from skiplists import upstream

    facts = read_run_facts(args.run) if args.run else None
    if args.format == "disabled-json":
        try:
            data = json.loads(Path(args.source).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(
                f"cannot read disabled-tests JSON: {exc}", where=args.source
            ) from None
        if not isinstance(data, dict):
            raise ConfigError("expected a JSON object", where=args.source)
        class_files = {i.test_class: i.file for i in facts.identities} if facts else {}
        devices = [d for d in (args.backend, facts.meta.backend if facts else "") if d]
        entries = upstream.import_disabled(
            data,
            device_names=devices,
            class_files=class_files,
            platform=args.platform,
            tier=args.tier,
            category=args.category,
        )
    else:
        module = importlib.import_module(args.source)
        allowlist = getattr(module, "op_allowlist", None)
        all_ops: list[str] = []
        if allowlist is not None:
            from torch.testing._internal.common_methods_invocations import op_db

            all_ops = [op.full_name for op in op_db]
        entries = upstream.from_test_configs(
            op_overrides=getattr(module, "op_overrides", None),
            op_allowlist=allowlist,
            test_exclusions=getattr(module, "test_exclusions", None),
            all_ops=all_ops,
            category=args.category,
        )
    editor = SkiplistText.read(args.to)
    editor.append(entries, f"imported from {args.source} on {dt.date.today()}")
    text = editor.text()
    args.to.parent.mkdir(parents=True, exist_ok=True)
    args.to.write_text(text, encoding="utf-8")
    print(f"{len(entries)} entr(y/ies) written to {args.to}", file=sys.stderr)
    return 0


def _export(args: argparse.Namespace) -> int:
    from skiplists import upstream

    skiplist, _paths, facts = _context(args)
    if args.format == "disabled-json":
        data, left_out = upstream.export_disabled(
            skiplist, facts.identities if facts else None, device=args.backend
        )
        for entry in left_out:
            print(
                f"{entry.where}: not exported: {entry.selector.kind} selector (give --from RUN)",
                file=sys.stderr,
            )
        output: Any = data
    else:
        output = upstream.to_test_configs(skiplist, args.backend)
    text = json.dumps(output, indent=2, sort_keys=True) + "\n"
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


def _write_or_show(changes: dict[Path, tuple[str, str]], *, write: bool, show: bool) -> None:
    for path, (old, new) in changes.items():
        if show:
            sys.stdout.write(unified_diff(old, new, path))
        if write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(new, encoding="utf-8")
