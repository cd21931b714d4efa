"""The HTML report in a real browser: headless Chromium draws every plot, logs nothing, and takes a screenshot.

Chromium runs with no network access needed (plotly.js is inline). Its console messages go to stderr through
``--enable-logging=stderr``; the report logs nothing when healthy, so any console line (an exception, a failed
plot) fails the test. Skipped only when Chromium is missing and the ``CI`` variable is unset.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_report

FIXTURES = Path(__file__).parent / "fixtures" / "report"
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
if BROWSER is None and not os.environ.get("CI"):
    pytest.skip("chromium is not installed (apt-get install chromium); CI always runs this test",
                allow_module_level=True)


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    assert BROWSER, "CI is set but chromium is missing: apt-get install chromium"
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=10000", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_html_report_renders_in_chromium(tmp_path: Path, record_property) -> None:
    results = tmp_path / "results"
    (results / "trials").mkdir(parents=True)
    for name in ("single", "failed"):  # plots of every kind, plus study names that try to inject markup
        shutil.copy(FIXTURES / name / "trials" / "rows.parquet", results / "trials" / f"{name}.parquet")
    run_report([str(results)], check=True)
    page = (results / "report.html").as_uri()

    dom = chromium(tmp_path, "--dump-dom", page)
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [line for line in dom.stderr.splitlines() if ":CONSOLE" in line]
    assert not console, "console output from the report:\n" + "\n".join(console)

    html = dom.stdout
    plots = re.split(r'<div class="plot[^"]*" id="plot-\d+"', html)[1:]  # plotly adds js-plotly-plot
    assert len(plots) >= 7, "scatter, importance, marginals and history of the single-objective study"
    for i, part in enumerate(plots):
        body = part.split("<script", 1)[0]  # the last plot's part ends where the scripts begin
        assert 'class="main-svg"' in body, f"plot {i} was not drawn"
        marks = len(re.findall(r'class="(?:point|bars|trace scatter[^"]*|js-line)"', body))
        assert marks > 0, f"plot {i} has no data marks"
    # Injected names stay text: no element was created from them.
    assert "<script>alert(1)</script>" not in html and "<img src=\"x\"" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html

    shot = results / "report.png"
    snap = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,2600", page)
    assert snap.returncode == 0 and shot.is_file() and shot.stat().st_size > 20_000, snap.stderr[-2000:]
    record_property("screenshot", str(shot))
    print(f"screenshot of the HTML report: {shot}")


_MEASURE = """<script>
window.addEventListener("load", function () {
  var out = [];
  document.querySelectorAll("div.scroll").forEach(function (d) {
    out.push(d.scrollWidth + "|" + d.clientWidth + "|" + d.querySelector("caption").textContent);
  });
  out.push("page|" + document.documentElement.scrollWidth + "|" + window.innerWidth);
  var pre = document.createElement("pre"); pre.id = "measured"; pre.textContent = out.join("\\n");
  document.body.appendChild(pre);
});
</script></body>"""


def test_html_tables_fit_1400px_and_a_multi_study_page_has_contents(tmp_path: Path) -> None:
    """In a 1,400-px window no table is wider than the page (nothing cut off, no sideways scrolling), and a page of
    several studies opens with links to every section and a summary of each study's best."""
    results = tmp_path / "results"
    (results / "trials").mkdir(parents=True)
    for name in ("single", "failed", "multi", "data"):
        shutil.copy(FIXTURES / name / "trials" / "rows.parquet", results / "trials" / f"{name}.parquet")
    run_report([str(results)], check=True)
    page = (results / "report.html").read_text()
    measured = tmp_path / "measured.html"
    measured.write_text(page.replace("</body>", _MEASURE, 1))
    dom = chromium(tmp_path, "--dump-dom", "--window-size=1400,900", measured.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    report = re.search(r'<pre id="measured">(.*?)</pre>', dom.stdout, re.S).group(1)
    lines = report.splitlines()
    tables = [line.split("|", 2) for line in lines if not line.startswith("page|")]
    assert len(tables) > 10
    wide = [(caption, scroll, client) for scroll, client, caption in tables if int(scroll) > int(client)]
    assert not wide, wide
    _page, page_width, window = next(line for line in lines if line.startswith("page|")).split("|")
    assert int(window) == 1400 and int(page_width) <= 1400
    toc = re.search(r'<nav class="toc">(.*?)</nav>', page, re.S)
    assert toc, "no contents on a page of several studies"
    targets = re.findall(r'href="#(section-\d+)"', toc.group(1))
    assert len(targets) >= 5 and all(f'id="{t}"' in page for t in targets)
    assert "Summary: the best configuration of each study" in page
