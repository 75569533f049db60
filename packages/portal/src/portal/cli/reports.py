"""What ``portal status``, ``checkpoints``, ``jobs`` and ``plugins`` print: the read views
(:class:`~portal.control.views.JobViews`, :mod:`portal.jobs`) in words and tables, or as JSON."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from portal.cli.exits import note
from portal.control import wording
from portal.control.views import job_row_words
from portal.core import units
from portal.core.domain import JobState

if TYPE_CHECKING:
    from portal.jobs import Portal

__all__ = ["checkpoints", "jobs", "plugins", "status"]


def status(portal: Portal, options: argparse.Namespace) -> int:
    """``portal status JOB [--json]``: its state, attempts, checkpoints and the check's verdict."""
    job = portal.job(options.job)
    found = portal.status(job)
    if options.json:
        print(json.dumps(found.to_json(), indent=2))
        return 0
    print(f"job       {job.id}" + (f" ({job.name})" if job.name else ""))
    print(f"state     {job.state}")
    print(f"script    {job.script} {' '.join(job.args)}".rstrip())
    if job.nproc_per_node:
        print(f"ranks     {job.nproc_per_node} (torch.distributed, launched by Portal)")
    print(f"workdir   {found.workdir}")
    print(f"attempts  {len(found.attempts)}")
    for a in found.attempts:
        code = "" if a.exit_code is None else f", exit {a.exit_code}"
        print(f"  #{a.number} {a.machine}: {a.state}{code}")
    if found.error:  # a failed job's last words on stderr: why it failed
        print(f"error     {found.error}")
    ckpt = found.last_checkpoint
    if ckpt:
        size = "size unknown" if ckpt.bytes is None else units.size(ckpt.bytes)
        when = "" if ckpt.created_at is None else f", {units.clock(ckpt.created_at)}"
        print(f"checkpoint {ckpt.id} ({size}{when})")
    else:
        print("checkpoint none complete")
    last = found.last_attempt
    if last and last.state == "lost" and ckpt and job.state is not JobState.RUNNING:
        how = (
            "stopped during the pause for its notice, before its checkpoint was stored"
            if found.lost_during_notice
            else "stopped without notice"
        )
        print(f"lost      attempt {last.number} {how}: {wording.lost_way_out(job)}")
    kept = found.kept_checkpoint
    if kept:
        print(
            f"kept      attempt {kept.attempt}'s checkpoint ({units.size(kept.bytes)}) "
            f"is on this machine only, at {kept.path}: its upload failed. `portal resume "
            f"{options.job}` stores it first and continues from it"
        )
    for partial in found.incomplete_checkpoints:
        print(f"  {partial.id}: incomplete, not resumable ({partial.note})")
    for bad in found.damaged_checkpoints:
        print(f"  {bad.id}: {bad.state}, not resumable ({bad.why})")
    if found.waiting_for:
        print(f"silent    {found.waiting_for}")
    carry = found.carry
    if carry.ok is None:
        print("carry     not checked yet")
    elif carry.ok:
        print("carry     ok: a checkpoint can carry the whole state")
    else:
        print(f"carry     {'blocked' if carry.blocked else 'warning'}: {carry.warning}")
    return 0


def checkpoints(portal: Portal, options: argparse.Namespace) -> int:
    """``portal checkpoints JOB [--verify] [--json]``: each checkpoint, its state and why."""
    job = portal.job(options.job)
    views = portal.checkpoints(job, verify=options.verify)
    if options.json:
        print(json.dumps([v.to_dict() for v in views], indent=2))
        return 0
    if not views:
        print(f"job {job.id} has no checkpoints")
        return 0
    rows = [("CHECKPOINT", "STORED", "SIZE", "STATE", "WHY")]
    for v in views:
        rows.append(
            (
                v.id,
                units.clock(v.created_at) if v.created_at else "-",
                units.size(v.bytes) if v.bytes else "-",
                v.state,
                v.why,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if options.verify:
        for v in views:
            if v.repaired:
                note(
                    f"checkpoint {v.id} was marked damaged and reads whole again: the mark "
                    "is cleared, and it can be resumed"
                )
        intact = sum(v.resumable for v in views)
        note(f"verified every chunk: {intact} of {len(views)} checkpoint(s) can be resumed")
    return 0


def jobs(portal: Portal, options: argparse.Namespace) -> int:
    """``portal jobs [--json]``: every job, oldest first: when it was submitted, how long it
    has run, its state, where its last attempt ran, its attempts (and how many were
    recoveries), its last checkpoint (size, age), the checkpoint check's verdict, its script.
    ``--json``: the same rows as objects (schema in docs/cli-json.md)."""
    listed = portal.views.jobs()
    if options.json:
        print(json.dumps(listed, indent=2))
        return 0
    from portal.cli.table import STATE_STYLES, print_table

    now = portal.plane.clock.now()
    headers = (
        "JOB",
        "NAME",
        "SUBMITTED",
        "DURATION",
        "STATE",
        "MACHINE",
        "ATTEMPTS",
        "LAST CHECKPOINT",
        "CARRY",
        "SCRIPT",
    )
    rows = []
    for j in listed:
        words = job_row_words(j, now)
        rows.append(
            (
                j["job"],
                j["name"] or "-",
                words["submitted"],
                words["duration"],
                j["state"],
                j["machine"] or "-",
                words["attempts"],
                words["last_checkpoint"],
                j["carry"] or "-",
                j["script"],
            )
        )
    print_table(headers, rows, styles={4: STATE_STYLES})
    if not rows:  # the header alone, on stdout; the way on, for people, on stderr
        note(f"no jobs yet {_where_jobs_are(portal)}: start one with `portal run SCRIPT`")
    return 0


def _where_jobs_are(portal: Portal) -> str:
    """Which jobs a listing shows, in words: another PORTAL_HOME or control plane has its
    own (the first thing to check when a job seems to be gone)."""
    from portal.control.config import remote_control

    remote = remote_control(portal.plane.settings)
    if remote is not None:
        return f"on the control plane at {remote.url}"
    database = portal.plane.settings.control_db
    if database == "sqlite":
        return f"under PORTAL_HOME {portal.plane.home}"
    if database.startswith(("postgresql://", "postgres://")):
        return "in the PostgreSQL control plane (PORTAL_CONTROL_DB)"
    return f"in {database}"


def plugins(portal: Portal, options: argparse.Namespace) -> int:
    """``portal plugins [--json]``: each plugin loaded (its distribution, version and hooks),
    what each registers, and the ones that failed to load, with why and the way out."""
    from portal.cli.table import print_table

    plugins = portal.plane.plugins
    loaded = plugins.plugins()
    rows = plugins.inventory()
    failures = [f.describe() for f in plugins.load_failures]
    if options.json:
        print(json.dumps({"plugins": loaded, "registered": rows, "failed": failures}, indent=2))
        return 0
    print_table(
        ("PLUGIN", "DISTRIBUTION", "VERSION", "HOOKS"),
        [
            (p["name"], p["distribution"] or "-", p["version"] or "-", ", ".join(p["hooks"]))
            for p in loaded
        ],
    )
    print()
    print_table(
        ("KIND", "NAME", "DISTRIBUTION", "WHAT"),
        [
            (
                r["kind"],
                r["name"],
                r["distribution"],
                r.get("description") or r.get("error", ""),
            )
            for r in rows
        ],
    )
    for failure in failures:
        note(failure)
    return 1 if failures or any("error" in r for r in rows) else 0
