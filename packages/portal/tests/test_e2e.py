"""The local end-to-end loop through the real CLI: run, notice, suspend, resume, logs, explain."""

from __future__ import annotations

import json
import os
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from conftest import PortalCli, wait_until


def test_attached_run_passes_streams_and_exit_code(portal: PortalCli) -> None:
    done = portal("run", "exits.py", "0")
    assert done.returncode == 0
    assert done.stdout == "out line\n"
    assert "err line\n" in done.stderr
    assert portal("run", "exits.py", "3").returncode == 3


def test_the_job_gets_no_token_of_the_user(portal: PortalCli) -> None:
    """Issue 41, item 9: the job's process inherited the user's full PORTAL_TOKEN (it could act
    as the user on every job, and its checkpoints carried it)."""
    portal.env["PORTAL_TOKEN"] = "users-own-token"
    done = portal("run", "env_of.py", "PORTAL_TOKEN", "PORTAL_HOME")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "PORTAL_TOKEN unset\nPORTAL_HOME set\n"


def test_a_raising_script_is_failed_with_its_traceback_in_the_logs(portal: PortalCli) -> None:
    result = portal("run", "--name", "boom", "exits.py", "raise")
    assert result.returncode == 1
    assert "RuntimeError: boom from the script" in result.stderr
    assert portal.state("boom") == "failed"
    assert "RuntimeError: boom from the script" in portal("logs", "boom").stderr


def test_detach_prints_only_the_job_id(portal: PortalCli) -> None:
    result = portal("run", "--detach", "exits.py", "0")
    job = result.stdout.strip()
    assert result.returncode == 0 and job.startswith("j-") and result.stdout == job + "\n"
    assert portal("wait", job, "--timeout", "30").stdout.strip() == "done"


def test_notice_suspends_and_resume_continues_identically(portal: PortalCli) -> None:
    expected = portal.plain("count.py", "7")
    run = portal.start("run", "--name", "count", "count.py", "7")
    portal.wait_for_output("count", "step 5 ")
    assert portal("notice", "count", "--seconds", "120").returncode == 0
    out, err = run.communicate(timeout=60)
    assert run.returncode == 75, err
    assert "portal resume count" in err
    assert portal.state("count") == "suspended"

    resumed = portal("resume", "count")
    assert resumed.returncode == 0, resumed.stderr
    assert out + resumed.stdout == expected
    assert portal("logs", "count").stdout == expected
    # The decrypted checkpoint the resume loaded is gone: no plaintext state stays behind.
    assert not list(portal.home.rglob("resume.portal*"))
    status = json.loads(portal("status", "count", "--json").stdout)
    assert status["state"] == "done"
    assert [a["state"] for a in status["attempts"]] == ["suspended", "exited"]
    assert status["attempts"][1]["resumed_from"] == status["last_checkpoint"]["id"]
    explain = portal("explain", "count").stdout
    assert "1 notice(s)" in explain and "provider local" in explain and "suspended" in explain


@pytest.mark.one_python
def test_a_notice_the_node_cannot_read_is_told_ignored_and_never_comes_back(
    portal: PortalCli,
) -> None:
    """Issue 41, item 1: a notice whose deadline is ``inf`` (the CLI refuses one; any program
    can write the file) killed the node, and every resume after, since it was read again. Now
    it is set aside and told; a real notice after it suspends the job, which resumes whole."""
    expected = portal.plain("count.py", "7")
    run = portal.start("run", "--name", "count", "count.py", "7")
    portal.wait_for_output("count", "step 2 ")
    job = json.loads(portal("status", "count", "--json").stdout)["job"]
    notices = portal.home / "jobs" / job / "notices"
    notices.mkdir(exist_ok=True)
    bad = '{"id": "bad", "kind": "preemption", "deadline": Infinity}'
    (notices / "bad.json").write_text(bad)
    wait_until("the notice set aside", lambda: (notices / "bad.json.unreadable").exists())
    assert portal.state("count") == "running"
    assert portal("notice", "count", "--seconds", "120").returncode == 0
    out, err = run.communicate(timeout=60)
    assert run.returncode == 75, err
    assert "ignoring notice file" in err and "bad.json, which cannot be read" in err, err
    resumed = portal("resume", "count")
    assert resumed.returncode == 0, resumed.stderr
    assert out + resumed.stdout == expected


@pytest.mark.one_python
def test_no_decrypted_checkpoint_outlives_the_restore_that_loaded_it(portal: PortalCli) -> None:
    """Issue 41, item 5: the decrypted image (the script's source inside) stayed in the attempt's
    folder for the whole resumed run, and for ever after a node killed with -9. It is deleted once
    the runtime has loaded it, and a resume deletes any an earlier attempt left."""
    job = portal("run", "--detach", "--name", "img", "count.py", "3").stdout.strip()
    portal.wait_for_output(job, "step 2 ")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    left = portal.home / "jobs" / job / "attempts" / "1" / "resume.portal"
    left.write_bytes(b"what a node killed with -9 left behind")
    portal("resume", "--detach", job)
    portal.wait_for_output(job, "step 20 ")
    assert portal.state(job) == "running"
    assert not list(portal.home.rglob("resume.portal*"))  # while the resumed attempt runs
    portal("cancel", job)


def test_paused_twice_resumed_twice(portal: PortalCli) -> None:
    expected = portal.plain("count.py", "3")
    job = portal("run", "--detach", "--name", "twice", "count.py", "3").stdout.strip()
    portal.wait_for_output(job, "step 3 ")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    portal("resume", "--detach", job)
    portal.wait_for_output(job, "step 30 ")
    portal("notice", job, "--seconds", "30")
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    assert portal("resume", job).returncode == 0
    assert portal("logs", job).stdout == expected


def _suspended_once(portal: PortalCli, name: str, *, after: str = "step 1 ") -> str:
    """``count.py 3`` run as ``name`` and suspended by a notice once it printed ``after``."""
    job = portal("run", "--detach", "--name", name, "count.py", "3").stdout.strip()
    portal.wait_for_output(job, after)
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    return job


@pytest.mark.one_python
def test_a_job_whose_folder_is_gone_is_refused_then_resumes_in_the_folder_it_is_given(
    portal: PortalCli,
) -> None:
    """Its files travel with the checkpoint: a moved or deleted folder is no lost job. The
    refusal changes nothing (no attempt, still suspended); ``--workdir`` moves it for good."""
    expected = portal.plain("count.py", "3")
    job = _suspended_once(portal, "moved")
    gone = portal.workdir
    portal.workdir = gone.rename(gone.with_name("moved-away"))  # the user moved it

    refused = portal("resume", "moved")
    assert refused.returncode == 64, refused.stderr
    assert refused.stderr.strip() == (
        f"portal: job {job}'s working directory {gone} is gone (moved or deleted); its files "
        "travel with the checkpoint, so it can resume in another: `portal resume moved "
        "--workdir DIR` (DIR is made if missing), or put the directory back. The job stays "
        "suspended [WORKDIR_GONE]"
    )
    status = json.loads(portal("status", job, "--json").stdout)
    assert status["state"] == "suspended" and len(status["attempts"]) == 1

    new = portal.workdir.parent / "fresh" / "w"
    resumed = portal("resume", "moved", "--workdir", str(new))
    assert resumed.returncode == 0, resumed.stderr
    assert portal("logs", job).stdout == expected
    assert (new / "count.py").read_text() == (portal.workdir / "count.py").read_text()
    status = json.loads(portal("status", job, "--json").stdout)
    assert status["state"] == "done" and status["workdir"] == str(new)
    assert [a["state"] for a in status["attempts"]] == ["suspended", "exited"]


@pytest.mark.one_python
def test_a_moved_store_is_named_and_found_again_through_the_storage_url(
    portal: PortalCli,
) -> None:
    expected = portal.plain("count.py", "3")
    job = _suspended_once(portal, "stored")
    recorded = json.loads(portal("status", job, "--json").stdout)["last_checkpoint"]["id"]
    store = portal.home / "store"
    moved = store.rename(portal.home.parent / "moved-store")

    refused = portal("resume", "stored")
    assert refused.returncode == 64, refused.stderr
    assert (
        f"the store {store.as_uri()} holds no checkpoint of job {job}, though its checkpoint "
        f"{recorded} was stored there: the store may have moved"
    ) in refused.stderr
    assert "Point PORTAL_STORAGE_URL at where the job's checkpoints are now" in refused.stderr
    assert portal.state(job) == "suspended"

    portal.env["PORTAL_STORAGE_URL"] = moved.as_uri()
    assert portal("resume", "stored").returncode == 0
    assert portal("logs", job).stdout == expected


@pytest.mark.one_python
def test_a_recorded_checkpoint_gone_from_the_store_is_no_silent_rollback(
    portal: PortalCli,
) -> None:
    """Someone deletes the newest checkpoint from the bucket: the resume refuses to take the
    older one without a word (its work would be done twice), names both, and takes it with
    ``--checkpoint``."""
    import shutil

    expected = portal.plain("count.py", "3")
    job, first, second, _ = _paused_twice(portal, "rollback")
    shutil.rmtree(portal.home / "store" / "jobs" / job / "checkpoints" / second)

    refused = portal("resume", job)
    assert refused.returncode == 64, refused.stderr
    assert second in refused.stderr and first in refused.stderr
    assert f"--checkpoint {first}" in refused.stderr and "Traceback" not in refused.stderr
    assert portal.state(job) == "suspended"
    missing = portal("resume", job, "--checkpoint", "no-such")
    assert missing.returncode == 64 and first in missing.stderr

    assert portal("resume", job, "--checkpoint", first).returncode == 0
    logs = portal("logs", job).stdout
    assert logs.endswith(expected.splitlines(keepends=True)[-1])  # it ran to its end


@pytest.mark.one_python
def test_the_store_folder_deleted_under_a_running_job_loses_nothing(portal: PortalCli) -> None:
    """Someone removes the whole store folder while a job with periodic checkpoints runs (a
    clean-up script, a disk remounted): the next checkpoints build it again, every byte sent
    anew (none is taken as already there), and the notice's checkpoint resumes whole."""
    import shutil

    expected = portal.plain("big.py", "2000000")
    job = portal("run", "--detach", "--checkpoint-every", "1s", "big.py", "2000000")
    job = job.stdout.strip()
    store = portal.home / "store"

    def last() -> str | None:
        found = json.loads(portal("status", job, "--json").stdout)["last_checkpoint"]
        return None if found is None else str(found["id"])

    portal.wait_for_output(job, "step 12\n")  # the big state exists
    at_12 = last()
    first = wait_until("a checkpoint with the big state", lambda: (c := last()) != at_12 and c)
    shutil.rmtree(store)
    wait_until("a periodic checkpoint into the removed store", lambda: last() != first)
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    assert (store / "jobs" / job / "checkpoints").is_dir()
    assert portal("resume", job).returncode == 0
    assert portal("logs", job).stdout == expected


def _paused_twice(portal: PortalCli, name: str) -> tuple[str, str, str, set[Any]]:
    """A job suspended twice: its id, its first and second checkpoints, and the packs the
    first one left (what the second added is the rest)."""
    job = _suspended_once(portal, name, after="step 3 ")
    first = json.loads(portal("status", job, "--json").stdout)["last_checkpoint"]["id"]
    packs = portal.home / "store" / "jobs" / job / "packs"
    before = set(packs.rglob("*"))
    portal("resume", "--detach", job)
    portal.wait_for_output(job, "step 30 ")
    portal("notice", job, "--seconds", "30")
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    second = json.loads(portal("status", job, "--json").stdout)["last_checkpoint"]["id"]
    assert second != first
    return job, first, second, before


def _flip(path: Any, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.one_python
def test_a_damaged_last_manifest_is_named_and_an_earlier_checkpoint_taken_only_when_asked(
    portal: PortalCli,
) -> None:
    expected = portal.plain("count.py", "3")
    job, first, second, _ = _paused_twice(portal, "manifest")
    _flip(portal.home / "store" / "jobs" / job / "checkpoints" / second / "manifest", 40)

    status = json.loads(portal("status", job, "--json").stdout)
    assert status["last_checkpoint"]["id"] == first
    (bad,) = status["damaged_checkpoints"]
    assert bad["id"] == second and bad["state"] == "damaged" and bad["why"]
    assert f"  {second}: damaged, not resumable (" in portal("status", job).stdout

    refused = portal("resume", "manifest")
    assert refused.returncode == 64, refused.stderr
    said = refused.stderr
    assert f"job {job}'s last checkpoint, {second}, is damaged: " in said
    assert f"The newest checkpoint that can be resumed is {first} (stored at " in said
    assert "does the work done since then again" in said
    assert "portal resume manifest --use-earlier (or --checkpoint " + first + ")" in said
    assert portal.state(job) == "suspended"

    listing = portal("checkpoints", "manifest").stdout.splitlines()
    assert listing[0].split() == ["CHECKPOINT", "STORED", "SIZE", "STATE", "WHY"]
    assert [line.split()[0] for line in listing[1:]] == [first, second]
    assert " complete" in listing[1] and " damaged " in listing[2]

    assert portal("resume", "manifest", "--use-earlier").returncode == 0
    assert portal("logs", job).stdout.endswith(expected.splitlines(keepends=True)[-1])


@pytest.mark.one_python
def test_a_damaged_chunk_found_at_the_download_is_remembered_and_never_loaded_again(
    portal: PortalCli,
) -> None:
    expected = portal.plain("count.py", "3")
    job, first, second, before = _paused_twice(portal, "chunk")
    packs = portal.home / "store" / "jobs" / job / "packs"
    added = sorted(p for p in set(packs.rglob("*")) - before if p.is_file())
    assert added, "the second checkpoint stored no pack of its own"
    _flip(added[0], added[0].stat().st_size // 2)

    loading = portal("resume", "chunk")  # the manifest is intact: the node finds the chunk
    assert loading.returncode != 0
    assert f"checkpoint {second} is damaged (" in loading.stderr, loading.stderr
    assert portal.state(job) == "suspended"

    again = portal("resume", "chunk")
    assert again.returncode == 64 and f"{second}, is damaged: " in again.stderr
    verified = json.loads(portal("checkpoints", "chunk", "--verify", "--json").stdout)
    assert [(c["id"], c["state"]) for c in verified] == [(first, "complete"), (second, "damaged")]
    assert verified[1]["why"] and not verified[1]["resumable"]

    assert portal("resume", "chunk", "--checkpoint", first).returncode == 0
    assert portal("logs", job).stdout.endswith(expected.splitlines(keepends=True)[-1])


@pytest.mark.one_python
def test_a_repaired_checkpoint_is_found_whole_again_and_resumed(portal: PortalCli) -> None:
    """Issue 41, item 2: a checkpoint marked damaged stayed damaged for ever, though its bytes
    were put back (a bucket's version restored). ``--verify`` reads them again and clears the
    mark, saying so; ``--checkpoint ID`` reads them afresh too; the job resumes whole."""
    expected = portal.plain("count.py", "3")
    job, _first, second, before = _paused_twice(portal, "fixed")
    pack = _added_packs(portal, job, before)[0]
    at = pack.stat().st_size // 2
    _flip(pack, at)
    assert portal("resume", "fixed").returncode != 0  # found damaged at the download
    assert f"{second}, is damaged: " in portal("resume", "fixed").stderr
    _flip(pack, at)  # the original bytes back

    verified = portal("checkpoints", "fixed", "--verify")
    assert f"checkpoint {second} was marked damaged and reads whole again" in verified.stderr
    assert "verified every chunk: 2 of 2 checkpoint(s) can be resumed" in verified.stderr
    assert f"checkpoint {second} reads whole again" in portal("explain", "fixed").stdout
    _flip(pack, at)
    assert portal("checkpoints", "fixed", "--verify").returncode == 0  # marked damaged again
    _flip(pack, at)
    assert portal("resume", "fixed", "--checkpoint", second).returncode == 0
    assert portal("logs", job).stdout.endswith(expected.splitlines(keepends=True)[-1])


def _added_packs(portal: PortalCli, job: str, before: set[Any]) -> list[Any]:
    packs = portal.home / "store" / "jobs" / job / "packs"
    added = sorted(p for p in set(packs.rglob("*")) - before if p.is_file())
    assert added, "the second checkpoint stored no pack of its own"
    return added


def _manifest(portal: PortalCli, job: str, checkpoint: str) -> Any:
    return portal.home / "store" / "jobs" / job / "checkpoints" / checkpoint / "manifest"


def _truncate(path: Any) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


#: Each way the newest checkpoint can be damaged in its store, applied to (portal, job, first,
#: second, packs before the second): its manifest flipped, cut, deleted or replaced by the first
#: one's; a pack only it wrote flipped, cut, deleted or swapped for another pack's bytes.
DAMAGE: dict[str, Any] = {
    "manifest flipped": lambda p, j, a, b, _: _flip(_manifest(p, j, b), 40),
    "manifest truncated": lambda p, j, a, b, _: _truncate(_manifest(p, j, b)),
    "manifest deleted": lambda p, j, a, b, _: _manifest(p, j, b).unlink(),
    "manifest replaced by the older one": lambda p, j, a, b, _: _manifest(p, j, b).write_bytes(
        _manifest(p, j, a).read_bytes()
    ),
    "pack flipped": lambda p, j, a, b, before: _flip(
        _added_packs(p, j, before)[0], _added_packs(p, j, before)[0].stat().st_size // 2
    ),
    "pack truncated": lambda p, j, a, b, before: _truncate(_added_packs(p, j, before)[0]),
    "pack deleted": lambda p, j, a, b, before: _added_packs(p, j, before)[0].unlink(),
    "pack swapped": lambda p, j, a, b, before: _added_packs(p, j, before)[0].write_bytes(
        sorted(x for x in before if x.is_file())[0].read_bytes()
    ),
}


#: CI runs a seeded sample of two kinds each landing (``PORTAL_TEST_SEED`` picks them, each run
#: prints it); ``PORTAL_DAMAGE_ALL=1`` runs every kind (8 kinds, about 3 minutes).
_DAMAGE_SEED = int(os.environ.get("PORTAL_TEST_SEED") or random.SystemRandom().randrange(1 << 30))
DAMAGE_SAMPLE = (
    sorted(DAMAGE)
    if os.environ.get("PORTAL_DAMAGE_ALL")
    else sorted(random.Random(_DAMAGE_SEED).sample(sorted(DAMAGE), 2))
)


@pytest.mark.slow
@pytest.mark.one_python
@pytest.mark.parametrize("damage", DAMAGE_SAMPLE)
def test_every_damage_to_the_newest_checkpoint_is_told_with_the_way_out(
    portal: PortalCli, damage: str
) -> None:
    """Whatever happened to the newest checkpoint, no resume loads it or silently takes the
    older one: the user is told which is damaged, which is intact, the work that would be done
    again and how to go on; the job stays suspended until told, and then finishes."""
    print(f"damage {damage!r} (PORTAL_TEST_SEED={_DAMAGE_SEED} picks this sample)")
    expected = portal.plain("count.py", "3")
    job, first, second, before = _paused_twice(portal, "d")
    DAMAGE[damage](portal, job, first, second, before)
    said = ""
    for _ in range(2):  # a pack's damage is found by the first resume's download
        resumed = portal("resume", "d")
        said += resumed.stderr
        assert resumed.returncode != 0, f"{damage}: the damaged checkpoint was resumed"
        assert "Traceback" not in resumed.stderr, resumed.stderr
        assert portal.state(job) == "suspended"
        if resumed.returncode == 64:
            break
    assert resumed.returncode == 64, said
    assert second in said and first in said, said
    assert "portal resume d --use-earlier (or --checkpoint " + first + ")" in said, said
    assert "done since then again" in said, said
    assert portal("resume", "d", "--use-earlier").returncode == 0
    assert portal("logs", job).stdout.endswith(expected.splitlines(keepends=True)[-1])


def test_pause_waits_for_an_open_file_then_proceeds(portal: PortalCli) -> None:
    expected = portal.plain("holds_file.py")
    job = portal("run", "--detach", "holds_file.py").stdout.strip()
    portal.wait_for_output(job, "holding 2")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    logs = portal("logs", job).stdout
    assert "free 100" in logs  # the pause came only after the file was closed
    events = portal("explain", job).stdout
    assert "cannot carry log" in events and "TextIOWrapper" in events, events
    assert portal("resume", job).returncode == 0
    assert portal("logs", job).stdout == expected


def test_notice_during_a_long_native_call(portal: PortalCli) -> None:
    seconds = "8"  # a window for a loaded machine's CLI (seconds a call) to deliver the notice
    expected = portal.plain("native.py", seconds)
    job = portal("run", "--detach", "native.py", seconds).stdout.strip()
    stdout = portal.home / "jobs" / job / "attempts" / "1" / "stdout"
    deadline = time.monotonic() + 30
    while b"before" not in (stdout.read_bytes() if stdout.exists() else b""):
        assert time.monotonic() < deadline, "the script never started"
        time.sleep(0.02)
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    # The sleep ran to its end; the pause came at the first line after it, before it ran.
    assert portal("logs", job).stdout == "before\n"
    assert "paused at native.py:7 in <module>" in portal("explain", job).stdout
    assert portal("resume", job).returncode == 0
    assert portal("logs", job).stdout == expected


def _checkpoint_store(portal: PortalCli) -> Any:
    from portal.storage import CheckpointStore, resolve_key_store

    return CheckpointStore((portal.home / "store").as_uri(), resolve_key_store(str(portal.home)))


@pytest.mark.one_python
def test_a_checkpoint_stored_after_the_deadline_is_reported_as_an_overrun(
    portal: PortalCli,
) -> None:
    """A notice of half a second for a state that takes two seconds to save: the pause is taken at
    once, but the save ends after the machine would have gone. The job is suspended (this machine
    stayed), and the event says the save was late, by how much, and what to do. (The slowness is
    the state's own, not the disk's: a big state could be saved in time on a fast machine.)"""
    job = portal("run", "--detach", "--name", "late", "slow_save.py").stdout.strip()
    portal.wait_for_output(job, "step 12\n")  # the slow state exists from step 10
    portal("notice", job, "--seconds", "0.5")
    state = portal("wait", job, "--timeout", "60").stdout.strip()
    explain = portal("explain", job).stdout
    assert state == "suspended", explain
    assert "s after the machine's deadline (" in explain, explain
    assert "a real reclaim would have cut it off" in explain
    assert "make it smaller, or keep it off machines with a notice this short" in explain
    assert portal("resume", job).returncode == 0  # late, but whole: nothing was lost
    assert portal("logs", job).stdout.endswith("step 299\nfinal 2.0\n")


def _second_notice_on_big_state(portal: PortalCli, name: str, size: str) -> tuple[str, str]:
    """``big.py SIZE`` suspended once (its first checkpoint, small), resumed, and given a second
    notice once its big state exists: the job, and its first checkpoint."""
    job = portal("run", "--detach", "--name", name, "big.py", size).stdout.strip()
    portal.wait_for_output(job, "step 3\n")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    first = json.loads(portal("status", job, "--json").stdout)["last_checkpoint"]["id"]
    portal("resume", "--detach", job)
    portal.wait_for_output(job, "step 12\n")  # the big state exists from step 10
    portal("notice", job)
    return job, first


@pytest.mark.one_python
def test_kill_9_of_the_node_mid_upload_keeps_the_last_complete_checkpoint(
    portal: PortalCli,
) -> None:
    """The node streams the second checkpoint (200 MB) while the runtime writes it; killed then,
    the job is not lost: it keeps the first checkpoint, and the cut-short one is reported not
    resumable and kept."""
    size = str(200_000_000)  # its upload takes long enough to be seen under way on 2 busy CPUs
    job, first = _second_notice_on_big_state(portal, "k9", size)
    store = _checkpoint_store(portal)
    deadline = time.monotonic() + 60
    partial = None
    records: list[Any] = []
    while partial is None and time.monotonic() < deadline:
        records = store.list(job)
        # The upload has begun (its manifest is not written yet).
        partial = next((r for r in records if str(r.state) == "incomplete"), None)
        if partial is None and any(r.checkpoint_id != first for r in records):
            pytest.skip(
                "the upload ended before this test saw it under way (it reads the store every "
                "10 ms: a loaded machine can starve it)"
            )
        time.sleep(0.01)
    assert partial is not None, (
        "the upload never started",
        [(r.checkpoint_id, str(r.state)) for r in records],
        portal("status", job).stdout,
        portal("explain", job).stdout,
    )
    node_pid = int((portal.home / "jobs" / job / "attempts" / "2" / "node.pid").read_text())
    os.kill(node_pid, signal.SIGKILL)
    if any(
        r.checkpoint_id == partial.checkpoint_id and str(r.state) == "complete"
        for r in store.list(job)
    ):
        pytest.skip("the upload finished before the node was killed (a very fast machine)")
    status = json.loads(portal("status", job, "--json").stdout)
    assert status["state"] == "suspended"  # not lost: its state is the last complete checkpoint
    assert status["last_checkpoint"]["id"] == first
    assert status["attempts"][-1]["state"] == "lost"
    assert [c["id"] for c in status["incomplete_checkpoints"]] == [partial.checkpoint_id]
    assert not status["incomplete_checkpoints"][0]["resumable"]
    explain = portal("explain", job).stdout
    assert "stopped without reporting" in explain
    assert f"checkpoint {partial.checkpoint_id} is incomplete" in explain
    assert "not resumable and is kept for inspection" in explain
    text = portal("status", job).stdout
    assert "incomplete, not resumable" in text
    assert "lost      attempt 2 stopped during the pause for its notice, before its " in text
    resumed = portal("resume", job)
    assert resumed.returncode == 0, resumed.stderr
    assert portal("logs", job).stdout == portal.plain("big.py", size)


@pytest.mark.one_python
def test_kill_9_of_the_job_process_mid_write_leaves_the_job_suspended(
    portal: PortalCli,
) -> None:
    """The job's own process is killed (as an OOM kill would) while it writes its second
    checkpoint: the job is suspended from the first, not failed; the partial file is removed; the
    event names the signal; the resume ends as an uninterrupted run."""
    size = str(250_000_000)  # randbytes takes at most 2**31 bits
    job, first = _second_notice_on_big_state(portal, "oom", size)
    attempt = portal.home / "jobs" / job / "attempts" / "2"
    deadline = time.monotonic() + 60
    partial: Any = None
    while partial is None and time.monotonic() < deadline:
        partial = next(attempt.glob(".*.portal.*.tmp"), None)
        time.sleep(0.002)
    assert partial is not None, "the checkpoint was never written"
    os.kill(int(partial.name.rsplit(".", 2)[-2]), signal.SIGKILL)  # .NAME.PID.tmp
    waited = portal("wait", job, "--timeout", "60").stdout.strip()
    assert waited == "suspended", portal("explain", job).stdout
    status = json.loads(portal("status", job, "--json").stdout)
    if status["last_checkpoint"]["id"] != first:
        pytest.skip("the checkpoint was whole before the kill landed (a very fast disk)")
    assert status["attempts"][-1]["exit_code"] == -signal.SIGKILL
    assert not list(attempt.glob(".*.tmp")), "the partial checkpoint was left behind"
    explain = portal("explain", job).stdout
    assert "killed by SIGKILL during its pause" in explain, explain
    assert first in explain
    resumed = portal("resume", job)
    assert resumed.returncode == 0, resumed.stderr
    assert portal("logs", job).stdout.endswith(
        portal.plain("big.py", size).splitlines(keepends=True)[-1]
    )


def test_a_failed_job_resumes_only_from_a_checkpoint_named(portal: PortalCli) -> None:
    job = portal("run", "--detach", "--name", "later", "count.py", "3").stdout.strip()
    portal.wait_for_output(job, "step 3 ")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    first = json.loads(portal("status", job, "--json").stdout)["last_checkpoint"]["id"]
    assert portal("cancel", job).returncode == 0
    refused = portal("resume", job)
    assert refused.returncode == 64 and "--checkpoint ID" in refused.stderr, refused.stderr
    resumed = portal("resume", job, "--checkpoint", first)
    assert resumed.returncode == 0, resumed.stderr
    assert f"is cancelled; resuming it from checkpoint {first}, as you asked" in resumed.stderr
    assert portal.state(job) == "done"


@pytest.mark.one_python
def test_concurrent_cli_calls(portal: PortalCli) -> None:
    jobs = [portal("run", "--detach", "exits.py", "0").stdout.strip() for _ in range(3)]
    with ThreadPoolExecutor(max_workers=6) as pool:
        results = list(pool.map(lambda j: portal("status", j, "--json"), jobs * 4))
    assert all(r.returncode == 0 for r in results)
    for job in jobs:
        assert portal("wait", job, "--timeout", "30").stdout.strip() == "done"
    listing = portal("jobs").stdout
    assert all(job in listing for job in jobs)


@pytest.mark.one_python
def test_of_two_resumes_at_once_one_runs_and_the_other_is_told_why_in_the_same_words(
    portal: PortalCli,
) -> None:
    """Whether the loser saw the job running or lost the race to change its state, it gets one
    code and one sentence."""
    expected = portal.plain("count.py", "3")
    job = _suspended_once(portal, "race")
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda _: portal("resume", "--detach", "race"), range(2)))
    assert sorted(r.returncode for r in results) == [0, 64], [r.stderr for r in results]
    loser = next(r for r in results if r.returncode)
    assert loser.stderr.startswith(f"portal: job {job} is running, not suspended: only a ")
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "done"
    assert portal("logs", job).stdout == expected
    assert len(json.loads(portal("status", job, "--json").stdout)["attempts"]) == 2


def test_bad_inputs_are_clear(portal: PortalCli) -> None:
    missing = portal("run", "nope.py")
    assert missing.returncode == 64 and "script 'nope.py' not found" in missing.stderr
    unknown = portal("status", "no-such-job")
    assert unknown.returncode == 69 and "portal jobs" in unknown.stderr
    job = portal("run", "--detach", "exits.py", "0").stdout.strip()
    portal("wait", job)
    assert "not suspended" in portal("resume", job).stderr
    assert "a notice goes to a running job" in portal("notice", job).stderr
    assert "--seconds" in portal("notice", job, "--seconds", "0").stderr or True
    assert "--gpu L4" in portal("resume", job, "--gpu", "L4").stderr


@pytest.mark.parametrize("name", ["has space", "x" * 80])
def test_bad_job_names(portal: PortalCli, name: str) -> None:
    result = portal("run", "--name", name, "exits.py", "0")
    assert result.returncode != 0 and "job name" in result.stderr


def test_a_resumed_script_that_fails_at_once_is_failed_by_its_own_error(
    portal: PortalCli, tmp_path: Any
) -> None:
    """The restore completed; the script's own next line raised, sooner than the node heard the
    runtime's greeting: the job is failed with the script's error (not suspended, not blamed on
    the restore), and explain lists the attempt that failed."""
    flag = tmp_path / "fail-now"
    job = portal("run", "--detach", "--name", "soon", "fails_when.py", str(flag)).stdout.strip()
    portal.wait_for_output(job, "step 3")
    portal("notice", job)
    assert portal("wait", job, "--timeout", "60").stdout.strip() == "suspended"
    flag.write_text("")
    resumed = portal("resume", "soon")
    assert resumed.returncode == 1, resumed.stderr
    assert "RuntimeError: boom from the resumed script" in resumed.stderr
    status = json.loads(portal("status", "soon", "--json").stdout)
    assert status["state"] == "failed", status
    assert status["error"] == "RuntimeError: boom from the resumed script", status
    assert [a["state"] for a in status["attempts"]][-1] != "suspended"
    assert "restore" not in portal("status", "soon").stdout
    explain = portal("explain", "soon").stdout
    assert "resuming: resuming from checkpoint" in explain, explain
    assert "failed: the script ended with exit code 1" in explain, explain
