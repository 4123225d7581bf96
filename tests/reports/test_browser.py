"""The report in a real browser: Debian's headless Chromium, driven by Playwright, opens
pages from disk (file://), filters a table, follows links, searches, and shows hostile test
messages as text without running anything."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from playwright.sync_api import Dialog, Page, sync_playwright

from reports.build import build_model
from reports.render import render_report
from tests.reports.conftest import cause_records, find_chromium, make_runs_root, write_small_run

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="chromium is not installed (apt-get install chromium, or set CHROMIUM to its path)",
    ),
]
#: The target: every page opens within 2 s.
OPEN_LIMIT_S = 2.0
#: How long one step (a click's navigation, a search answering) may take on a busy machine.
STEP_TIMEOUT_MS = 30_000
#: The search page's status once the index has loaded and the query is answered.
SEARCH_ANSWERED = (
    "(t => t.includes('matching') && !t.includes('Loading') && t)"
    "(document.getElementById('status').textContent)"
)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("browser")
    runs_root = make_runs_root(base)
    model = build_model(
        runs_root / "run-b",
        compare_dir=runs_root / "run-a",
        baseline_dir=base / "baseline" / "cpu",
        history_root=runs_root,
    )
    out = base / "report"
    render_report(model, out, ["html"])
    return out


@pytest.fixture(scope="module")
def chromium() -> Iterator[tuple[Page, list[str]]]:
    """One headless Chromium for the module, with one page, and the messages of the dialogs
    that page opened (each dismissed, or the page would block)."""
    assert CHROMIUM is not None
    dialogs: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page()
            page.set_default_timeout(STEP_TIMEOUT_MS)
            page.on("dialog", dismiss)
            yield page, dialogs
        finally:
            browser.close()


@pytest.fixture
def page(chromium: tuple[Page, list[str]]) -> Page:
    return chromium[0]


@pytest.fixture
def dialogs(chromium: tuple[Page, list[str]]) -> list[str]:
    """The dialogs the page opens during the test (those of earlier tests cleared)."""
    chromium[1].clear()
    return chromium[1]


def open_page(page: Page, url: str) -> float:
    """Open ``url`` and wait for its load event; returns the seconds it took."""
    started = time.monotonic()
    page.goto(url, wait_until="load")
    return time.monotonic() - started


def path_ends_with(suffix: str) -> Callable[[str], bool]:
    return lambda url: urlparse(url).path.endswith(suffix)


def exact_text(text: str) -> re.Pattern[str]:
    return re.compile(f"^{re.escape(text)}$")


def test_index_filter_and_follow_a_link(report: Path, page: Page) -> None:
    assert open_page(page, (report / "index.html").as_uri()) < OPEN_LIMIT_S
    assert page.evaluate("document.querySelector('h1').textContent") == "Summary"
    assert "12" in page.evaluate("document.querySelector('.headline').textContent")

    page.locator('nav a[href="files.html"]').first.click()
    page.wait_for_url(path_ends_with("/files.html"))
    visible = "[...document.querySelectorAll('#files tbody tr')].filter(r => !r.hidden).length"
    assert page.evaluate(visible) == 2
    page.locator("input[data-filter-table=files]").fill("torch")
    assert page.evaluate(visible) == 1
    assert page.evaluate("document.querySelector('[data-count-for=files]').textContent") == (
        "1 of 2 rows"
    )
    page.locator("#files tbody tr:not([hidden]) a").first.click()
    page.wait_for_url(path_ends_with("/files/test_torch.py-0.html"))
    assert page.evaluate("document.querySelector('h1').textContent") == "test_torch.py"


def test_hostile_messages_render_as_text_and_run_nothing(
    report: Path, page: Page, dialogs: list[str]
) -> None:
    assert open_page(page, (report / "files" / "test_torch.py-0.html").as_uri()) < OPEN_LIMIT_S
    assert page.evaluate("typeof window.__hostile") == "undefined"
    assert dialogs == []
    # Only the report's own script; no element made from a message or a test name.
    assert page.evaluate("[...document.scripts].map(s => s.getAttribute('src'))") == [
        "../static/report.js"
    ]
    assert page.evaluate("document.querySelectorAll('img, td.test b').length") == 0
    messages = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('tr[id]')].map(r => [r.id, r.innerText]))"
    )
    script_row = next(text for text in messages.values() if "test_hostile_script" in text)
    assert '<script>window.__hostile = 1; alert("xss")</script>' in script_row
    assert '<img src=x onerror="window.__hostile=2">' in script_row
    megabyte_row = next(text for text in messages.values() if "test_hostile_megabyte" in text)
    assert "bell\\x07 nul\\x00 escape\\x1b[31m" in megabyte_row
    assert "more characters not shown" in megabyte_row and len(megabyte_row) < 10000
    assert any("test_name_<b>bold</b>" in text for text in messages.values())


def test_search_loads_from_disk_and_links_to_the_test(
    report: Path, page: Page, dialogs: list[str]
) -> None:
    assert open_page(page, (report / "search.html").as_uri() + "?q=hostile") < OPEN_LIMIT_S
    assert page.wait_for_function(SEARCH_ANSWERED).json_value() == "2 matching tests."
    rows = page.evaluate(
        "[...document.querySelectorAll('#results tbody tr')].map(r => r.cells[0].textContent)"
    )
    assert rows == [
        "test_torch.py::TestTorchDeviceType::test_hostile_megabyte",
        "test_torch.py::TestTorchDeviceType::test_hostile_script",
    ]
    page.locator("#q").fill("<b>bold")
    page.wait_for_function("document.getElementById('status').textContent == '1 matching tests.'")
    assert page.evaluate("document.querySelectorAll('#results b').length") == 0
    page.locator("#results a").first.click()
    page.wait_for_url(lambda url: urlparse(url).fragment == "t3")
    assert page.evaluate("document.getElementById('t3').innerText").startswith(
        "TestTorchDeviceType::test_name_<b>bold</b>"
    )
    assert page.evaluate("typeof window.__hostile") == "undefined"
    assert dialogs == []


def test_triage_link_opens_search_filtered_by_detail(report: Path, page: Page) -> None:
    open_page(page, (report / "triage.html").as_uri())
    page.locator("#triage a").filter(has_text=exact_text("aten::cumsum.out")).first.click()
    page.wait_for_url(path_ends_with("/search.html"))
    status = page.wait_for_function(SEARCH_ANSWERED).json_value()
    assert status == "2 matching tests with detail aten::cumsum.out."
    assert page.evaluate(
        "[...document.querySelectorAll('#results tbody tr')].map(r => r.cells[2].textContent)"
    ) == ["missing_lowering", "missing_lowering"]


@pytest.fixture(scope="module")
def cause_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("causes")
    run = write_small_run(base, "run-c", records=cause_records(), coverage=False)
    out = base / "report"
    render_report(build_model(run), out, ["html"])
    return out


def test_an_entry_links_to_the_search_for_its_expected_failures(
    cause_report: Path, page: Page
) -> None:
    assert open_page(page, (cause_report / "index.html").as_uri()) < OPEN_LIMIT_S
    page.locator('a[href="entries.html"]').first.click()
    page.wait_for_url(path_ends_with("/entries.html"))
    entry = exact_text("missing_lowering aten::lgamma.out")
    page.locator("#entries a").filter(has_text=entry).first.click()
    page.wait_for_url(path_ends_with("/search.html"))
    status = page.wait_for_function(SEARCH_ANSWERED).json_value()
    assert status == "3 matching tests with detail aten::lgamma.out."
    assert (
        page.evaluate(
            "[...document.querySelectorAll('#results tbody tr')].map(r => r.cells[1].textContent)"
        )
        == ["xfailed"] * 3
    )


def test_feature_matrix_leads_to_the_tests_behind_a_cell(
    report: Path, page: Page, dialogs: list[str]
) -> None:
    assert open_page(page, (report / "index.html").as_uri()) < OPEN_LIMIT_S
    page.locator('nav a[href="features.html"]').first.click()
    page.wait_for_url(path_ends_with("/features.html"))
    changed = page.evaluate(
        "[...document.querySelectorAll('#changes tbody tr')].map(r => r.innerText)"
    )
    assert changed == ["integers\tsupported\tunsupported"]
    row = "document.getElementById('eager_ops').cells"
    assert page.evaluate(f"[...{row}].slice(1, 5).map(c => c.textContent)") == [
        "partial",
        "partial",
        "18.2%",
        "11",
    ]
    page.locator("#eager_ops a").first.click()
    page.wait_for_url(path_ends_with("/features/eager_ops.html"))
    tests = "[...document.querySelectorAll('table.tests tbody tr')].map(r => r.cells[0].innerText)"
    listed = page.evaluate(tests)
    assert len(listed) == 9 and "test_torch.py::TestTorchDeviceType::test_hostile_script" in listed
    # A listed test links to its row on its file page.
    page.locator("table.tests a").filter(has_text="test_out_cumsum_float64").click()
    page.wait_for_url(path_ends_with("/files/test_ops.py-0.html"))
    fragment = urlparse(page.url).fragment
    assert "test_out_cumsum_float64" in page.evaluate(
        f"document.getElementById('{fragment}').innerText"
    )
    assert page.evaluate("typeof window.__hostile") == "undefined"
    assert dialogs == []
