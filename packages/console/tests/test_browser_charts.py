"""The run page's charts in headless Chromium, for a job with three checkpoints on two machines
(made with the real CLI: charted_job.py), and the jobs list's ages."""

from __future__ import annotations

import re
from typing import Any

import pytest
from charted_job import make_charted_job
from conftest import PortalCli, screenshot


@pytest.fixture(scope="module")
def charted(portal: PortalCli) -> str:
    return make_charted_job(portal)


def test_the_run_page_charts_checkpoints_attempts_notices_and_the_bound(
    portal: PortalCli, console_url: str, charted: str, page: Any
) -> None:
    from playwright.sync_api import expect

    status = portal.status(charted)
    machines = list(dict.fromkeys(a["machine"] for a in status["attempts"]))
    assert len(status["attempts"]) == 3 and len(machines) == 2
    listed = portal("checkpoints", charted, "--json")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.count('"complete"') == 3

    page.goto(f"{console_url}/jobs/{charted}")
    expect(page.locator("body")).to_have_attribute("data-charts", "drawn")

    size = page.locator("#chart-checkpoint-size svg[data-chart='checkpoint-size']")
    expect(size.locator("title").first).to_have_text("Checkpoint size")
    expect(size.locator("rect[data-checkpoint]")).to_have_count(3)
    expect(size).to_contain_text("size as stored")  # the axes are named
    expect(size).to_contain_text("checkpoint, oldest first")
    expect(page.locator("#chart-upload-time rect[data-checkpoint]")).to_have_count(3)
    expect(page.locator("#chart-upload-time svg")).to_contain_text("upload, seconds")

    strip = page.locator("#chart-attempts svg[data-chart='attempts']")
    expect(strip.locator("[data-row]")).to_have_count(2)  # one row per machine
    for machine in machines:
        expect(strip.locator(f'[data-row="{machine}"]')).to_have_count(1)
    expect(strip.locator("path[data-attempt]")).to_have_count(3)
    expect(strip.locator(f'[data-row="{machines[0]}"] path[data-attempt]')).to_have_count(2)
    expect(strip.locator("circle[data-notice]")).to_have_count(3)  # two notices, a reclaim
    expect(strip.locator(f'circle[data-machine="{machines[1]}"]')).to_have_count(1)
    expect(strip).to_contain_text("time since submitted")

    state = page.locator("#chart-state-bound svg[data-chart='state-bound']")
    expect(state.locator("[data-bound]")).to_have_count(1)
    bound = int(state.locator("[data-bound]").get_attribute("data-bound") or 0)
    assert 1000 <= bound <= 1200  # about 1.1 kB: the 30 s notice at 100 B/s
    checkpoints = state.locator('circle[data-figure="checkpoint as stored"]')
    expect(checkpoints).to_have_count(3)
    sizes = checkpoints.evaluate_all("nodes => nodes.map(n => n.dataset.stateBytes)")
    assert all(int(b) > bound for b in sizes), (sizes, bound)
    expect(page.locator("#chart-state-bound .chart-note")).to_be_hidden()
    expect(page.locator("#key-elsewhere")).to_be_hidden()
    path = screenshot(page, "run-page-charts")
    assert path.stat().st_size > 10_000

    load_ms = page.evaluate(
        "() => { const n = performance.getEntriesByType('navigation')[0];"
        " return n.loadEventEnd - n.startTime; }"
    )
    assert 0 < load_ms < 10_000


def test_the_jobs_list_says_when_each_job_was_submitted_and_how_long_it_ran(
    console_url: str, charted: str, page: Any
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{console_url}/")
    row = page.locator(f'#jobs tr[data-job="{charted}"]')
    expect(row.locator('[data-col="submitted"]')).to_have_text(
        re.compile(r"^(less than a minute|\d+ minutes?|\d+ hours) ago$")
    )
    expect(row.locator('[data-col="duration"]')).to_have_text(re.compile(r"^(\d+[dhm])?\d+[dhms]$"))
    expect(page.locator("#jobs thead")).to_contain_text("Submitted")
    screenshot(page, "jobs-list-ages")
