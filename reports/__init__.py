"""Reports: a run rendered as a static HTML dashboard, diffs and trends across runs and
releases, and machine outputs (JSON summary, Markdown, JUnit XML, HUD record).

Pipeline: ``build.build_model`` reads a run (pandas) into a view model of plain
dataclasses; ``render.render_report`` writes the chosen formats from it.

Command line::

    conformance report RUN [--out DIR] [--runs-root DIR] [--baseline RUN] [--compare RUN]
                       [--history RUNS_ROOT] [--format html,json,md,junit,hud]
                       [--claims FILE]

``RUN`` is a run folder, a run id under ``--runs-root`` or ``latest``. The output folder
holds ``index.html`` (open it from disk), ``features.html`` (the feature matrix:
``reports.features``; with ``--claims``, checked against the backend's claims:
``reports.claims``), ``summary.json``, ``summary.md``, ``junit.xml`` and ``hud.json``.
"""

from __future__ import annotations

__all__ = ["FORMATS", "ReportModel", "build_model", "model_from_frame", "render_report"]


def __getattr__(name: str) -> object:
    # Importing the package stays cheap (the CLI frame imports every part's cli module);
    # pandas and jinja2 load only when a report is built.
    if name in ("ReportModel", "build_model", "model_from_frame"):
        from reports import build

        return getattr(build, name)
    if name in ("FORMATS", "render_report"):
        from reports import render

        return getattr(render, name)
    raise AttributeError(name)
