"""The HTML report in a real browser: Debian's Chromium, headless, driven by Selenium through
its ``chromedriver``, with networking off (every request goes to a dead proxy) and the page
loaded from ``file://``. A cassette whose texts are HTML and script renders them as text, no
script runs, and the leaked foreign canary sits inside ``<mark class="leaked">``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from acp_fuzz.core.cassette import write_cassette
from tests.cover.test_report_html import HOSTILE, hostile_leak

pytestmark = pytest.mark.integration

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if CHROMIUM is None or DRIVER is None:
        pytest.skip("Debian's chromium and chromium-driver are not installed "
                    "(apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
                "--no-first-run", "--disable-background-networking",
                f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _hostile_page(tmp_path: Path) -> Path:
    """``acp-fuzz show --html`` of the hostile leak cassette, written to a file."""
    c = hostile_leak(HOSTILE.replace("window.pwned=1", "window.pwned=2")
                     + "<img src=x onerror=window.pwned=3>")
    cassette = write_cassette(tmp_path / "hostile.cassette", c.header, c.events)
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz", "show", "--html", str(cassette)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = tmp_path / "report.html"
    page.write_text(proc.stdout, encoding="utf-8")
    return page


def test_the_page_renders_hostile_text_as_text_and_marks_the_leak(
        browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    browser.get(_hostile_page(tmp_path).as_uri())
    assert browser.title.startswith("acp-fuzz: <img src=x")  # shown, never parsed
    assert browser.execute_script("return typeof window.pwned") == "undefined"
    assert browser.find_elements(By.TAG_NAME, "img") == []
    assert len(browser.find_elements(By.TAG_NAME, "script")) == 0
    leaked = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "mark.leaked")]
    assert leaked[0] == "leaked"  # the legend
    (mark,) = leaked[1:]
    assert mark.endswith("<img src=x onerror=window.pwned=3> [acp-fuzz canary A1]")
    assert mark.startswith("<img src=x onerror=alert(1)></script><script>window.pwned=2")
    # The leaked text is in the "arrived" column of B's turn, not in what was asked for.
    (cell,) = browser.find_elements(By.CSS_SELECTOR, "td.turn mark.leaked")
    asked, arrived = browser.find_elements(By.CSS_SELECTOR, "#model-19 + tr > td.turn")
    assert cell.find_element(By.XPATH, "ancestor::td") == arrived
    assert asked.text == "(no systemPrompt given)"
    assert "session B" in browser.find_element(By.ID, "model-19").text
    # The page's own style applied (inline, allowed by its policy): a leak is coloured.
    colour = browser.execute_script(
        "return getComputedStyle(document.querySelectorAll('mark.leaked')[1])"
        ".backgroundColor")
    assert colour == "rgb(248, 180, 180)"


def test_the_page_works_offline_and_its_policy_forbids_script(
        browser: Any, tmp_path: Path) -> None:
    browser.get(_hostile_page(tmp_path).as_uri())
    # Nothing was fetched: the only resource is the page itself.
    entries = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)")
    assert entries == []
    # Even a script put into the page's DOM after loading is refused by its policy.
    browser.execute_script(
        "const s = document.createElement('script'); s.textContent = 'window.pwned = 9';"
        "document.body.appendChild(s);")
    assert browser.execute_script("return typeof window.pwned") == "undefined"


def test_a_campaign_writes_its_page_and_the_browser_shows_the_finding_first(
        browser: Any, tmp_path: Path) -> None:
    """``target --report html:PATH`` end to end: the run's own page (not ``show --html`` of a
    cassette), opened in the browser, has the finding before the rules and marks the leak in
    the turn view."""
    from selenium.webdriver.common.by import By

    page = tmp_path / "run.html"
    proc = subprocess.run([sys.executable, "-m", "acp_fuzz", "target", "-n", "3", "-x",
                           "--cassette-dir", str(tmp_path / "c"), "--report", f"html:{page}",
                           "--", sys.executable, "-m", "acp_fuzz.reference_agent", "--bug",
                           "leak"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    browser.get(page.as_uri())
    headings = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
    assert headings.index("Findings") < headings.index("Rules checked"), headings
    assert "prompt.leak" in browser.find_element(By.TAG_NAME, "body").text
    assert browser.find_elements(By.CSS_SELECTOR, "td.turn mark.leaked")
    assert browser.execute_script(
        "return performance.getEntriesByType('resource').length") == 0
