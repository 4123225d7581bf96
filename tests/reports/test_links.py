"""Structure of a rendered report: every link and anchor resolves, nothing is loaded from
the network, and the search index links to rows that exist."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from reports.build import build_model
from reports.render import render_report
from reports.synthetic import synthetic_op_coverage, synthetic_run, write_run


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.tags.append(tag)
        if values.get("id"):
            self.ids.add(values["id"])
        for name in ("href", "src"):
            if values.get(name) is not None:
                self.links.append(values[name])


def parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def assert_valid_links(report: Path) -> int:
    """Check every href/src of every page; return how many links were checked."""
    pages = {p: parse(p) for p in report.rglob("*.html")}
    checked = 0
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            assert not parts.scheme and not parts.netloc, f"{path}: external link {link!r}"
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            assert target.is_file(), f"{path.relative_to(report)}: broken link {link!r}"
            assert report.resolve() in target.parents, f"{path}: link leaves the report {link!r}"
            if parts.fragment:
                ids = pages[target].ids if target in pages else set()
                assert parts.fragment in ids, f"{path.relative_to(report)}: no anchor {link!r}"
            checked += 1
    return checked


def assert_search_links_resolve(report: Path) -> int:
    """The search page builds links from its index as files/<slug>-<page>.html#t<index>;
    check each one exists, as the script would build it."""
    index = json.loads(re.search(r"= (.*);", (report / "search/index.js").read_text())[1])
    pages: dict[Path, set[str]] = {}
    count = 0
    for k in range(index["chunks"]):
        text = (report / f"search/data-{k}.js").read_text()
        records = json.loads(text[text.index(",") + 1 : text.rindex(")")])
        for test_id, _, _, _, file_code, position in records:
            page = position // index["pageSize"]
            path = report / "files" / f"{index['files'][file_code]}-{page}.html"
            if path not in pages:
                pages[path] = parse(path).ids
            assert f"t{position}" in pages[path], f"search link for {test_id} has no row"
            count += 1
    assert count == index["total"]
    return count


def test_every_link_and_anchor_resolves(runs_root: Path, tmp_path: Path) -> None:
    model = build_model(
        runs_root / "run-b",
        compare_dir=runs_root / "run-a",
        baseline_dir=runs_root.parent / "baseline" / "cpu",
        history_root=runs_root,
    )
    render_report(model, tmp_path / "report", ["html"])
    assert assert_valid_links(tmp_path / "report") > 100
    assert assert_search_links_resolve(tmp_path / "report") == 12


def test_links_resolve_across_pages_of_a_larger_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small pages, so files, failure groups and diff lists all span several pages.
    monkeypatch.setattr("reports.viewmodel.PAGE_SIZE", 25)
    monkeypatch.setattr("reports.html.PAGE_SIZE", 25)
    meta, frame = synthetic_run(800, seed=4, run_id="new")
    write_run(tmp_path / "new", meta, frame)
    (tmp_path / "new" / "op_coverage.json").write_text(json.dumps(synthetic_op_coverage(frame)))
    meta, frame = synthetic_run(790, seed=5, run_id="old")
    write_run(tmp_path / "old", meta, frame)
    model = build_model(tmp_path / "new", compare_dir=tmp_path / "old")
    assert max(row.pages for row in model.files) > 1
    render_report(model, tmp_path / "report", ["html"])
    assert assert_valid_links(tmp_path / "report") > 500
    assert assert_search_links_resolve(tmp_path / "report") == 800


def test_link_check_catches_a_broken_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.html").write_text('<a href="b.html#missing">b</a>')
    (tmp_path / "b.html").write_text('<p id="here">b</p>')
    with pytest.raises(AssertionError, match="no anchor"):
        assert_valid_links(tmp_path)
    (tmp_path / "a.html").write_text('<script src="https://cdn.example/x.js"></script>')
    with pytest.raises(AssertionError, match="external link"):
        assert_valid_links(tmp_path)
