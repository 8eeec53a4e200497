"""matrix.html in a real headless browser: the glance table is on the first screen, and nothing
overflows the page or its plots. Needs Chromium (Debian's ``chromium``); CI installs it and sets
INVARIANCE_REQUIRE_BROWSER=1, so there a missing browser fails instead of skipping."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from synthetic_records import CPU, rec

from pytest_invariance.matrix import render_matrix

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1000"]

# Runs in the page: where the first real-implementations table sits, what overflows.
PROBE = """
<script>
window.addEventListener('load', async () => {
  const t = document.querySelector('section.real table.matrix');
  const cell = t ? t.querySelector('td.cell details') : null;
  const opened = [...document.querySelectorAll('details[data-plots]'), cell].filter(d => d);
  for (const d of opened) { d.open = true; await invFill(d); }  // evidence and plots load on demand
  const svgs = [...document.querySelectorAll('svg')];
  const clipped = svgs.filter(s => {
    const vb = s.viewBox.baseVal, b = s.getBBox();
    return b.x < -1 || b.y < -1 || b.x + b.width > vb.width + 1 || b.y + b.height > vb.height + 1;
  }).map(s => s.getAttribute('aria-label'));
  const out = {
    table_top: t ? t.getBoundingClientRect().top : null,
    table_rows: t ? t.querySelectorAll('tbody tr').length : 0,
    first_cell: t ? (t.querySelector('td.cell summary') || {}).textContent : null,
    cell_lines: cell ? cell.querySelectorAll('div.o').length : 0,
    page_overflow: document.documentElement.scrollWidth - window.innerWidth,
    svgs: svgs.length, clipped: clipped,
    controls_folded: !!document.querySelector('details.controls:not([open])'),
  };
  document.body.insertAdjacentHTML('beforeend', '<pre id="probe">' + JSON.stringify(out) + '</pre>');
});
</script>
"""


def _records() -> list[dict]:
    out = []
    for hw in (None, CPU):
        kw = {} if hw is None else {"fingerprint": hw}
        out += [
            rec(implementation="reference", **kw),
            rec(implementation="reference", oracle="batch-position", **kw),
            rec(verdict="divergent", **kw),
            rec(implementation="mutant:splitk-matmul", verdict="divergent", **kw),
            rec(family="engine", implementation="bundled", mode="invariant", oracle="unique-samples",
                quantization="bf16", evidence={"unique": [1, 1, 1], "concurrency": [1, 8, 64], "failures": 0, "trials": 3},
                **kw),
        ]  # fmt: skip
    return out


@pytest.fixture(scope="module")
def browser() -> str:
    if CHROMIUM is None:
        if os.environ.get("INVARIANCE_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is not installed (apt-get install chromium), and this run requires it")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return CHROMIUM


def test_matrix_html_first_screen_shows_the_real_table_and_nothing_is_clipped(browser: str, tmp_path: Path) -> None:
    html = render_matrix(_records(), tmp_path)["html"]
    page = tmp_path / "probe.html"
    page.write_text(html.read_text().replace("</body>", PROBE + "</body>"))
    dom = subprocess.run([browser, *FLAGS, "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    found = re.search(r'<pre id="probe">(\{.*?)</pre>', dom.stdout)
    assert found, f"the page's probe did not run: {dom.stderr[-500:]}"
    probe = json.loads(found.group(1).replace("&quot;", '"'))
    assert probe["table_top"] is not None and probe["table_top"] < 1000, probe  # on the first screen
    assert probe["table_rows"] >= 3 and probe["first_cell"].startswith("✔"), probe
    assert probe["page_overflow"] <= 0, probe
    assert probe["svgs"] >= 3 and probe["clipped"] == [], json.dumps(probe)
    assert probe["cell_lines"] >= 1, probe  # the opened cell's evidence came out of the embedded document
    assert probe["controls_folded"], probe

    shot = tmp_path / "matrix.png"
    subprocess.run([browser, *FLAGS, f"--screenshot={shot}", html.as_uri()], capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank one
