"""Write a report's outputs into a folder, all or nothing.

Outputs are written into a sibling staging folder that replaces the target only when
every output succeeded, so a failed render never leaves a half-written dashboard, and a
folder that is not a report is never overwritten.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from conformance.errors import ConfigError
from reports.build import ReportModel
from reports.html import write_html
from reports.machine import hud_record, json_summary, markdown_summary, write_json, write_junit

__all__ = ["FORMATS", "MARKER", "parse_formats", "render_report"]

#: Output formats and the file each writes (html writes index.html and its pages).
FORMATS = {
    "html": "index.html",
    "json": "summary.json",
    "md": "summary.md",
    "junit": "junit.xml",
    "hud": "hud.json",
}
#: A file in every report folder, so re-rendering may replace it and nothing else.
MARKER = ".conformance-report"


def parse_formats(text: str) -> list[str]:
    """``"html,json"`` -> ``["html", "json"]``; ConfigError naming an unknown format."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in FORMATS]
    if unknown or not names:
        raise ConfigError(
            f"unknown format {', '.join(unknown) or repr(text)}; choose from {', '.join(FORMATS)}",
            where="--format",
        )
    return list(dict.fromkeys(names))


def render_report(model: ReportModel, out_dir: str | Path, formats: list[str]) -> list[Path]:
    """Write ``formats`` of ``model`` into ``out_dir``, replacing an earlier report there.

    Raises ConfigError when ``out_dir`` is a non-empty folder that holds no report.
    Returns the main file of each format, in the order given.
    """
    out_dir = Path(out_dir)
    if out_dir.exists():
        if not out_dir.is_dir():
            raise ConfigError("exists and is not a folder", where=str(out_dir))
        if any(out_dir.iterdir()) and not (out_dir / MARKER).exists():
            raise ConfigError(
                "folder is not empty and holds no report; not overwriting it", where=str(out_dir)
            )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = out_dir.parent / f".{out_dir.name}.partial-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        _write(model, staging, formats)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(staging, out_dir)
    return [out_dir / FORMATS[name] for name in formats]


def _write(model: ReportModel, folder: Path, formats: list[str]) -> None:
    (folder / MARKER).write_text("written by conformance report; replaced on re-render\n")
    # Generated output does not belong in version control.
    (folder / ".gitignore").write_text("*\n")
    for name in formats:
        path = folder / FORMATS[name]
        if name == "html":
            write_html(model, folder)
        elif name == "json":
            write_json(json_summary(model), path)
        elif name == "md":
            path.write_text(markdown_summary(model), encoding="utf-8")
        elif name == "junit":
            write_junit(model, path)
        elif name == "hud":
            write_json(hud_record(model), path)
