"""The HTML reports in a real browser: headless Chromium (Debian's /usr/bin/chromium) driven by
playwright. Each page must render with no console error, no failed or outside request, and show its
verdict, its findings and its charts; a screenshot of each is saved under tmp_path.

Never `playwright install`: the browser is the system's (`.ci/run` installs it with apt-get)."""
from __future__ import annotations

from pathlib import Path

import pytest

from perflab.__main__ import main
from perflab.analysis.reports.compare import compare
from perflab.doctor.sides import load_run
from perflab.doctor import diagnose

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
CATALOG = Path(__file__).resolve().parents[2] / "src" / "perflab" / "catalog"
SLOW = CATALOG / "01-launch-overhead" / "artifacts" / "slow.trace.json.gz"
SOLUTION = CATALOG / "01-launch-overhead" / "artifacts" / "solution.trace.json.gz"
NCU = Path(__file__).parents[1] / "data" / "ncu" / "bank_conflicts.csv"

if not CHROMIUM.exists():
    pytest.skip(f"{CHROMIUM} is missing (install Debian's chromium: apt-get install -y chromium; .ci/run does)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright==1.63.0 (the test extra)")


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


def open_page(browser, html: Path, shot: Path):
    """Load the file; return the page and what went wrong while loading it."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type in ("error", "warning")
            else None)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: problems.append(f"request failed: {r.url}"))
    page.on("request", lambda r: problems.append(f"outside request: {r.url}")
            if not r.url.startswith(("file://", "data:")) else None)
    page.goto(html.as_uri(), wait_until="load")
    page.screenshot(path=str(shot), full_page=True)
    print(f"screenshot: {shot}")
    assert shot.stat().st_size > 10_000
    return page, problems


def rendered(page, selector: str) -> bool:
    """The element exists and takes room on the page (it was laid out, not just parsed)."""
    box = page.locator(selector).first.bounding_box()
    return box is not None and box["width"] > 0 and box["height"] > 0


def test_doctor_report_renders(browser, tmp_path, capsys):
    html = tmp_path / "doctor.html"
    assert main(["doctor", str(SLOW), "--html", str(html)]) == 0
    capsys.readouterr()
    report = diagnose(SLOW)
    page, problems = open_page(browser, html, tmp_path / "doctor.png")
    assert problems == []
    assert page.locator("#verdict").inner_text().strip() == report.verdict
    ids = page.locator("section.finding").evaluate_all("els => els.map(e => e.dataset.finding)")
    assert ids == report.ids()
    assert page.locator("svg").count() >= 3 and rendered(page, "svg.lanes") and rendered(page, "svg.steps")
    assert page.locator("svg.lanes rect title").count() > 0  # busy slices drawn
    # the page's script works: the second finding opens with the toggle button
    closed = "document.querySelectorAll('#findings details:not([open])').length"
    assert page.evaluate(closed) == len(report.findings) - 1
    page.click("button[data-toggle='#findings']")
    assert page.evaluate(closed) == 0
    assert problems == []
    page.close()


def test_diff_report_renders(browser, tmp_path):
    from perflab.outputs import write_output
    from perflab.report.html import diff_html

    before, after = load_run(SLOW), load_run(SOLUTION)
    d = compare(before, after)
    html = write_output(tmp_path / "diff.html", diff_html(d, before.report, after.report))
    page, problems = open_page(browser, html, tmp_path / "diff.png")
    assert problems == []
    assert page.locator("#verdict").inner_text().strip() == d.verdict
    statuses = dict(page.locator("#finding-changes tr[data-finding]").evaluate_all(
        "rows => rows.map(r => [r.dataset.finding, r.children[1].textContent.trim()])"))
    assert statuses == {f.id: f.status for f in d.findings} and statuses["launch-overhead"] == "disappeared"
    assert page.locator("svg").count() >= 5 and rendered(page, "svg.steps")
    page.close()


def test_ncu_report_shows_the_roofline(browser, tmp_path, capsys):
    html = tmp_path / "ncu.html"
    assert main(["doctor", str(NCU), "--html", str(html)]) == 0
    capsys.readouterr()
    page, problems = open_page(browser, html, tmp_path / "ncu.png")
    assert problems == []
    assert page.evaluate("document.querySelector('img.roofline').naturalWidth") > 500  # the PNG decoded
    assert page.locator("[data-finding='bank-conflicts']").count() == 1
    page.close()
