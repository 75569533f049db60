"""The console's run page in headless Chromium: navigation to the load event, and to the charts
drawn. Run: ``python benchmarks/bench_console_page.py [--runs N]``.

The job is the browser tests' own (packages/console/tests/charted_job.py: three checkpoints on
two machines, made with the real CLI); the console is ``portal console`` in a subprocess, the
browser Debian's ``/usr/bin/chromium`` through Playwright. Prints the median of each figure for
the run page and for the jobs list (its peer measured in the same run), and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "console" / "tests"))

from charted_job import make_charted_job
from conftest import CHROMIUM, CHROMIUM_ARGS, _portal, console_on

_LOAD = (
    "() => { const n = performance.getEntriesByType('navigation')[0];"
    " return n.loadEventEnd - n.startTime; }"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    if not CHROMIUM.exists():
        print(f"skipped: {CHROMIUM} is absent (apt-get install -y chromium)")
        return 0
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as base:
        portal = _portal(Path(base))
        try:
            job = make_charted_job(portal)
            with console_on(portal) as url, sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
                )
                page = browser.new_page(viewport={"width": 1200, "height": 900})
                figures: dict[str, list[float]] = {
                    "run load": [],
                    "run charts": [],
                    "jobs load": [],
                }
                for _ in range(runs):
                    page.goto(f"{url}/jobs/{job}")
                    figures["run load"].append(page.evaluate(_LOAD))
                    page.wait_for_selector("body[data-charts='drawn']")
                    figures["run charts"].append(page.evaluate("() => performance.now()"))
                    page.goto(f"{url}/")
                    figures["jobs load"].append(page.evaluate(_LOAD))
                browser.close()
        finally:
            portal.kill_nodes()
    medians = {name: statistics.median(values) for name, values in figures.items()}
    print(f"console pages in headless Chromium, median of {runs} loads (ms):")
    for name, value in medians.items():
        print(f"  {name:<11} {value:8.1f}")
    print(f"  run page load / jobs list load: {medians['run load'] / medians['jobs load']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
