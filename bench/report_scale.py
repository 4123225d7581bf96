"""Report at scale: render a synthetic 154,000-outcome run and print time, peak memory and
page sizes against the targets (15 s, 2 GB, index page 1.5 MB).

The run has the realistic mix of reports.synthetic (about 45% passed, 45% skipped of which
a third for missing lowerings, failures across categories, crashes, timeouts, hostile
messages) plus op_coverage.json; a second pass adds a CPU baseline and an earlier run to
compare with. Each pass runs in a fresh process, so its peak memory is its own.

    python bench/report_scale.py [--tests 154000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 15.0
TARGET_MEMORY_MB = 2048.0
TARGET_INDEX_MB = 1.5
TARGET_OPEN_S = 2.0

# Runs in a child process: builds and renders one report, prints phase timings as JSON.
CHILD = r"""
import json, sys, time
started = time.perf_counter(); cpu = time.process_time()
from reports.build import build_model
from reports.render import render_report
args = json.loads(sys.argv[1])
model = build_model(args["run"], baseline_dir=args.get("baseline"),
                    compare_dir=args.get("compare"), history_root=args.get("history"))
built = time.perf_counter()
render_report(model, args["out"], args["formats"])
print(json.dumps({"build_s": built - started, "render_s": time.perf_counter() - built,
                  "total_s": time.perf_counter() - started,
                  "cpu_s": time.process_time() - cpu}))
"""


def make_runs(root: Path, tests: int) -> None:
    from reports.synthetic import synthetic_op_coverage, synthetic_run, write_run

    meta, frame = synthetic_run(
        tests, run_id="nightly-2", start_time="2026-11-02T00:00:00+00:00", progress=0.1
    )
    write_run(root / "nightly-2", meta, frame)
    (root / "nightly-2" / "op_coverage.json").write_text(json.dumps(synthetic_op_coverage(frame)))
    meta, frame = synthetic_run(
        tests, run_id="nightly-1", start_time="2026-11-01T00:00:00+00:00", torch_version="2.12.0"
    )
    write_run(root / "nightly-1", meta, frame)
    meta, frame = synthetic_run(tests, run_id="cpu", backend="cpu", seed=7, progress=0.9)
    write_run(root.parent / "baseline" / "cpu", meta, frame)


def render(args: dict, label: str) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)], check=True, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    timings = json.loads(result.stdout.strip().splitlines()[-1])
    timings.update(process_s=wall, peak_mb=peak_mb if peak_mb > before / 1024 else float("nan"))
    return timings


def sizes(out: Path) -> dict:
    files = [p for p in out.rglob("*") if p.is_file()]
    html = [p for p in files if p.suffix == ".html"]
    biggest = max(html, key=lambda p: p.stat().st_size)
    search = [p for p in files if p.parent.name == "search"]
    return {
        "files": len(files),
        "html_pages": len(html),
        "total_mb": sum(p.stat().st_size for p in files) / 2**20,
        "index_mb": (out / "index.html").stat().st_size / 2**20,
        "biggest_page": (str(biggest.relative_to(out)), biggest.stat().st_size / 2**20),
        "search_mb": sum(p.stat().st_size for p in search) / 2**20,
        "search_files": len(search),
    }


def open_pages(out: Path, page_sizes: dict) -> None:
    """Open the heaviest pages in headless Chromium (when installed) and time them."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.reports.conftest import find_chromium

    binary = find_chromium()
    if binary is None:
        print("\nchromium not installed: page open times not measured")
        return
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("\nplaywright not installed (the test extras): page open times not measured")
        return
    pages = [
        "index.html",
        "files.html",
        page_sizes["biggest_page"][0],
        "files/test_ops.py-0.html",
        "ops.html",
        "op_grid.html",
        "triage.html",
        "failures.html",
        "diff.html",
        "trends.html",
    ]
    print("\nopening pages in headless Chromium (file://):")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary)
        try:
            page = browser.new_page()
            page.set_default_timeout(120_000)
            for name in pages:
                started = time.monotonic()
                page.goto((out / name).as_uri(), wait_until="load")
                seconds = time.monotonic() - started
                print(f"  {name:<52} {seconds:5.2f} s  {verdict(seconds <= TARGET_OPEN_S)}")
            started = time.monotonic()
            page.goto((out / "search.html").as_uri() + "?q=conv2d", wait_until="load")
            opened = time.monotonic() - started
            page.wait_for_function(
                "!document.getElementById('status').textContent.includes('Loading')"
            )
            loaded = time.monotonic() - started
        finally:
            browser.close()
    print(f"  {'search.html (page)':<52} {opened:5.2f} s  {verdict(opened <= TARGET_OPEN_S)}")
    print(f"  {'search.html (whole index loaded, query answered)':<52} {loaded:5.2f} s")


def verdict(ok: bool) -> str:
    return "ok" if ok else "OVER"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", type=int, default=154000)
    parser.add_argument("--keep", type=Path, help="write runs and reports here and keep them")
    return parser


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    if options.keep:
        return measure(options, options.keep)
    # Without --keep, the runs and reports (hundreds of MB) go when the measurement ends.
    with tempfile.TemporaryDirectory(prefix="report-scale-") as scratch:
        return measure(options, Path(scratch))


def measure(options: argparse.Namespace, base: Path) -> int:
    """Generate the runs under ``base``, render the reports there, print the measurements."""
    runs = base / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    print(f"generating 3 synthetic runs of {options.tests:,} outcomes in {base} ...")
    t = time.perf_counter()
    make_runs(runs, options.tests)
    print(f"  generated in {time.perf_counter() - t:.1f} s (not part of the measurement)")
    print(
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} "
        "(wall time grows with the load of a shared machine; cpu time is close to what an "
        "idle one takes)\n"
    )
    passes = {
        "all formats": {
            "run": str(runs / "nightly-2"),
            "out": str(base / "report"),
            "formats": ["html", "json", "md", "junit", "hud"],
        },
        "all formats + baseline + compare + history": {
            "run": str(runs / "nightly-2"),
            "out": str(base / "report-full"),
            "formats": ["html", "json", "md", "junit", "hud"],
            "baseline": str(base / "baseline" / "cpu"),
            "compare": str(runs / "nightly-1"),
            "history": str(runs),
        },
    }
    print(
        f"{'pass':<44} {'wall s':>7} {'cpu s':>7} {'build s':>8} {'render s':>9} "
        f"{'peak MB':>8}  wall  cpu   memory"
    )
    results = {}
    for label, args in passes.items():
        r = render(args, label)
        results[label] = r
        print(
            f"{label:<44} {r['total_s']:>7.1f} {r['cpu_s']:>7.1f} {r['build_s']:>8.1f} "
            f"{r['render_s']:>9.1f} {r['peak_mb']:>8.0f}  "
            f"{verdict(r['total_s'] <= TARGET_SECONDS):<5} "
            f"{verdict(r['cpu_s'] <= TARGET_SECONDS):<5} "
            f"{verdict(r['peak_mb'] <= TARGET_MEMORY_MB)}"
        )
    s = sizes(base / "report-full")
    print(
        f"\npages (full pass): {s['html_pages']:,} HTML pages, {s['files']:,} files, "
        f"{s['total_mb']:.1f} MB in all"
    )
    print(
        f"  index.html {s['index_mb'] * 1024:.1f} KB (target {TARGET_INDEX_MB} MB: "
        f"{verdict(s['index_mb'] <= TARGET_INDEX_MB)})"
    )
    print(f"  biggest page {s['biggest_page'][0]} {s['biggest_page'][1]:.2f} MB")
    print(f"  search index {s['search_mb']:.1f} MB in {s['search_files']} script files")
    open_pages(base / "report-full", s)
    print(
        f"\ntargets: {TARGET_SECONDS:.0f} s and {TARGET_MEMORY_MB / 1024:.0f} GB per render, "
        f"index <= {TARGET_INDEX_MB} MB, every page open <= {TARGET_OPEN_S:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
