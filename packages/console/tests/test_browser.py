"""The console in headless Chromium: a job with a carry problem shows the checkpoint check's
banner and Overview line; a running job's page follows it until a notice suspends it."""

from __future__ import annotations

from typing import Any

from conftest import PortalCli, screenshot


def overview_row(page: Any, label: str) -> Any:
    return page.locator(f'#overview dd[data-row="{label}"]')


def test_a_carry_problem_shows_the_banner_and_the_overview_line(
    portal: PortalCli, console_url: str, page: Any
) -> None:
    from playwright.sync_api import expect

    run = portal("run", "--name", "digest", "holds_digest.py")
    assert run.returncode == 0, run.stderr
    status = portal.status("digest")
    warning = status["carry"]["warning"]
    assert warning.startswith(
        "A checkpoint of this job cannot carry digest (_hashlib.HASH: TypeError: cannot pickle "
        "'_hashlib.HASH' object). Portal cannot move or suspend it while it holds them"
    )

    page.goto(f"{console_url}/")
    row = page.locator(f'#jobs tr[data-job="{status["job"]}"]')
    expect(row).to_contain_text("digest")
    expect(row.locator("[data-state]")).to_have_text("done")
    screenshot(page, "jobs-list")
    row.get_by_role("link").click()

    expect(page).to_have_url(f"{console_url}/jobs/{status['job']}")
    banner = page.locator("#banner")
    expect(banner).to_be_visible()
    expect(banner.locator("h2")).to_have_text("Checkpoint check")
    expect(page.locator("#banner-text")).to_have_text(warning)
    expect(overview_row(page, "Checkpoint check")).to_have_text(
        "1 problem: cannot carry digest (_hashlib.HASH) (see the banner)"
    )
    expect(overview_row(page, "State")).to_have_text("done")
    expect(overview_row(page, "Attempts")).to_have_text("1")
    expect(overview_row(page, "Machine")).to_have_text("local (attempt 1: exited)")
    warned = page.locator('#timeline li[data-kind="carry-warning"]')
    expect(warned).to_have_count(1)
    expect(warned).to_contain_text("warn (checkpoint)")
    expect(warned).to_contain_text(warning)
    expect(page.locator('#attempt-1 pre[data-stream="stdout"]')).to_contain_text("final ")
    screenshot(page, "run-page-carry-problem")


def test_the_page_follows_a_job_until_a_notice_suspends_it(
    portal: PortalCli, console_url: str, page: Any
) -> None:
    from playwright.sync_api import expect

    started = portal("run", "--detach", "--name", "steps", "steps.py")
    assert started.returncode == 0, started.stderr
    job = started.stdout.strip()
    page.goto(f"{console_url}/jobs/steps")  # by name, as the CLI takes it

    expect(overview_row(page, "State")).to_have_text("running")
    expect(overview_row(page, "Checkpoint check")).to_have_text(
        "passed less than a minute ago", timeout=30_000
    )
    expect(page.locator("#banner")).to_be_hidden()
    expect(overview_row(page, "Last checkpoint")).to_have_text("none complete")
    stdout = page.locator('#attempt-1 pre[data-stream="stdout"]')
    expect(stdout).to_contain_text("step 10 total 55")
    screenshot(page, "run-page-running")
    updated = page.locator("body").get_attribute("data-updated")

    notice = portal("notice", job, "--seconds", "30")
    assert notice.returncode == 0, notice.stderr
    # No reload: the page follows the job by itself.
    expect(overview_row(page, "State")).to_have_text("suspended", timeout=60_000)
    expect(page.locator('#timeline li[data-kind="notice"]')).to_have_count(1)
    expect(page.locator('#timeline li[data-kind="suspended"]')).to_have_count(1)
    checkpoint = portal.status(job)["last_checkpoint"]
    assert checkpoint is not None
    expect(overview_row(page, "Last checkpoint")).to_contain_text(checkpoint["id"])
    expect(overview_row(page, "Machine")).to_have_text("local (attempt 1: suspended)")
    expect(page.locator("#banner h2")).to_have_text("Next step")  # the way on, first
    expect(page.locator("#banner-text")).to_have_text(
        "Suspended at its last checkpoint: continue it with `portal resume steps`"
    )
    assert page.locator("body").get_attribute("data-updated") != updated
    screenshot(page, "run-page-suspended")


def test_an_unknown_job_says_how_to_find_one(console_url: str, page: Any) -> None:
    from playwright.sync_api import expect

    response = page.goto(f"{console_url}/jobs/nope")
    assert response is not None and response.status == 404
    expect(page.get_by_role("link", name="All jobs")).to_have_attribute("href", "/")
    expect(page.locator("#error")).to_have_text(
        "no job 'nope': give a job id (j-...) or a job's name; `portal jobs` lists them"
    )


def test_a_long_log_opens_at_its_end_as_a_terminal_shows_it(
    portal: PortalCli, console_url: str, page: Any
) -> None:
    """A failed job with more output than the first read: the page shows its last lines (a
    progress bar's last frame, no colour codes), says how much came before, and says why the
    job failed in the banner."""
    from playwright.sync_api import expect

    run = portal("run", "--name", "long", "long_output.py")
    assert run.returncode == 1, run.stderr
    page.goto(f"{console_url}/jobs/long")

    expect(page.locator("#banner h2")).to_have_text("Failed")
    expect(page.locator("#banner-text")).to_have_text("Failed (exit code 1): loss is nan at step 7")
    expect(overview_row(page, "Error")).to_have_text("loss is nan at step 7")
    stdout = page.locator('#attempt-1 pre[data-stream="stdout"]')
    expect(stdout).to_contain_text("line 07999 of the warm-up\ntraining: 100%\ndiverged at step 7")
    text = stdout.inner_text()
    assert "\x1b" not in text and "training:   0%" not in text
    assert "line 00000 " not in text  # left out, and said so:
    expect(page.locator("#attempt-1 p[data-earlier]")).to_contain_text(
        "kB of earlier stdout not shown: `portal logs "
    )
    screenshot(page, "run-page-failed-long-log")
