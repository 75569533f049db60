"""`portal mcp` over stdio, driven by the official MCP SDK's client: its tools answer with the
objects the CLI prints (`status(job)` is `portal status --json`, carry included)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

import pytest
from conftest import PortalCli, wait_state
from mcp import Client
from mcp.client.stdio import StdioServerParameters


@pytest.fixture(scope="module")
def digest(portal: PortalCli) -> str:
    """A finished job whose checkpoint check found a digest it cannot carry."""
    run = portal("run", "--name", "digest", "holds_digest.py")
    assert run.returncode == 0, run.stderr
    return str(portal.status("digest")["job"])


def call(portal: PortalCli, calls: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Start `portal mcp`, list its tools, make ``calls`` in order; every answer by tool name
    (and its arguments, when a tool is called twice)."""

    async def session() -> dict[str, Any]:
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "portal.cli", "mcp"],
            env={k: v for k, v in portal.env.items() if k.startswith(("PORTAL_", "PATH"))},
            cwd=portal.workdir,
        )
        answers: dict[str, Any] = {}
        async with Client(server) as client:
            answers["tools"] = sorted(t.name for t in (await client.list_tools()).tools)
            for name, arguments in calls:
                result = await client.call_tool(name, arguments)
                answers[name if name not in answers else f"{name}{arguments}"] = result
        return answers

    return asyncio.run(session())


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    content = result.structured_content
    return content["result"] if set(content) == {"result"} else content


@pytest.fixture(scope="module")
def progress(portal: PortalCli) -> str:
    """A finished job whose output is a progress bar's frames and two-byte characters."""
    run = portal("run", "--name", "progress", "progress.py")
    assert run.returncode == 0, run.stderr
    return str(portal.status("progress")["job"])


@pytest.fixture(scope="module")
def answers(portal: PortalCli, digest: str, progress: str) -> dict[str, Any]:
    """One `portal mcp` session asked everything the tests check."""
    return call(
        portal,
        [
            ("status", {"job": "digest"}),
            ("jobs", {}),
            ("explain", {"job": digest}),
            ("logs", {"job": "digest"}),
            ("status", {"job": "nope"}),
            ("logs", {"job": "progress"}),
            ("logs", {"job": "progress", "max_bytes": 100}),
            ("logs", {"job": "progress", "max_bytes": -1}),
            ("logs", {"job": "progress", "max_bytes": 10**30}),
        ],
    )


def test_the_tools_answer_as_the_cli_does(
    portal: PortalCli, digest: str, answers: dict[str, Any]
) -> None:
    assert answers["tools"] == ["explain", "jobs", "logs", "status"]

    status = structured(answers["status"])
    assert status == json.loads(portal("status", "digest", "--json").stdout)
    carry = status["carry"]
    assert carry["ok"] is False and carry["blocked"] is None
    assert [p["name"] for p in carry["problems"]] == ["digest"]
    assert carry["warning"].startswith("A checkpoint of this job cannot carry digest")

    listed = [(j["job"], j["name"], j["state"]) for j in structured(answers["jobs"])]
    assert (digest, "digest", "done") in listed

    explained = structured(answers["explain"])
    assert explained["notices"] == []
    checks = explained["checkpoint_check"]
    # A first check before the digest exists may have passed; the warning follows in any case.
    assert [c for c in checks if c["decision"] == "warn"] == [
        {**checks[-1], "decision": "warn", "policy": "checkpoint", "kind": "carry-warning"}
    ]
    assert checks[-1]["message"] == carry["warning"]

    (attempt,) = structured(answers["logs"])
    assert attempt["attempt"] == 1 and attempt["stdout_truncated"] is False
    assert attempt["stdout"] == portal("logs", "digest").stdout
    assert attempt["stdout"].endswith("\n") and "final " in attempt["stdout"]


def test_every_tool_says_it_only_reads(portal: PortalCli) -> None:
    async def session() -> list[Any]:
        server = StdioServerParameters(
            command=sys.executable,
            args=["-m", "portal.cli", "mcp"],
            env={k: v for k, v in portal.env.items() if k.startswith(("PORTAL_", "PATH"))},
            cwd=portal.workdir,
        )
        async with Client(server) as client:
            return list((await client.list_tools()).tools)

    tools = asyncio.run(session())
    assert len(tools) == 4
    for tool in tools:
        assert tool.title, tool.name  # what a client shows its user
        assert tool.annotations is not None, tool.name
        assert tool.annotations.read_only_hint is True, tool.name
        assert tool.annotations.open_world_hint is False, tool.name


def test_logs_give_a_progress_bar_s_last_frame_and_cut_between_characters(
    portal: PortalCli, progress: str, answers: dict[str, Any]
) -> None:
    raw = (portal.home / "jobs" / progress / "attempts" / "1" / "stdout").read_bytes()
    assert b"\repoch 0:  50%" in raw  # what the job wrote (and `portal logs` gives as it is)
    assert b"\x1b[1;32mpassed" in raw
    (whole,) = structured(answers["logs" + str({"job": "progress"})])
    # As a terminal shows it: the bar's last frames, the words without their colour codes.
    assert whole["stdout"] == (
        "epoch 0: 100%\nepoch 1: 100%\npassed checks\nGrüße\n" + "ü" * 50 + "\n"
    )
    (cut,) = structured(answers["logs" + str({"job": "progress", "max_bytes": 100})])
    # The last 100 bytes begin inside a two-byte character: the text starts at the next one.
    assert cut["stdout"] == "ü" * 49 + "\n" and cut["stdout_truncated"] is True


@pytest.mark.parametrize("asked", [-1, 10**30])
def test_a_max_bytes_out_of_range_is_named_with_the_range(
    answers: dict[str, Any], asked: int
) -> None:
    result = answers["logs" + str({"job": "progress", "max_bytes": asked})]
    assert result.is_error
    text = " ".join(c.text for c in result.content)
    assert f"max_bytes {asked} is out of range: give 1 to 4194304" in text, text


def test_an_unknown_job_is_an_error_that_says_how_to_find_one(answers: dict[str, Any]) -> None:
    result = answers["status{'job': 'nope'}"]
    assert result.is_error
    text = " ".join(c.text for c in result.content)
    assert "no job 'nope': give a job id (j-...) or a job's name; `portal jobs` lists them" in text


def test_acting_tools_only_with_the_setting_and_each_does_what_the_persons_command_does(
    portal: PortalCli,
) -> None:
    """With mcp.actions on, notice, resume and cancel appear, say they change things (cancel
    that it ends one), and do what `portal notice|resume|cancel` do, in the server's process
    (portal.jobs); without it they are absent (the test above) and the server's instructions
    say how to turn them on."""
    job = portal("run", "--detach", "--name", "acted", "steps.py", "200").stdout.strip()
    end = time.monotonic() + 30
    while "step 3 " not in portal("logs", job).stdout and time.monotonic() < end:
        time.sleep(0.1)
    acting = {k: v for k, v in portal.env.items() if k.startswith(("PORTAL_", "PATH"))}
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "portal.cli", "mcp"],
        env={**acting, "PORTAL_MCP_ACTIONS": "1"},
        cwd=portal.workdir,
    )

    async def session() -> tuple[list[Any], Any, Any]:
        async with Client(server) as client:
            tools = list((await client.list_tools()).tools)
            noticed = await client.call_tool("notice", {"job": "acted"})
            wait_state(portal, job, "suspended")
            resumed = await client.call_tool("resume", {"job": "acted"})
            return tools, noticed, resumed

    tools, noticed, resumed = asyncio.run(session())
    hints = {t.name: t.annotations for t in tools}
    assert sorted(hints) == ["cancel", "explain", "jobs", "logs", "notice", "resume", "status"]
    for name in ("notice", "resume", "cancel"):
        assert hints[name] is not None and hints[name].read_only_hint is False, name
    assert hints["cancel"].destructive_hint is True  # type: ignore[union-attr]
    assert hints["notice"].destructive_hint is False  # type: ignore[union-attr]
    assert structured(noticed)["command"] == "portal notice acted"
    assert structured(noticed)["job"] == job
    assert structured(noticed)["said"].startswith("notice ")
    answer = structured(resumed)
    assert (answer["job"], answer["attempt"], answer["machine"]) == (job, 2, "local")
    assert (
        answer["checkpoint"]
        == json.loads(portal("status", job, "--json").stdout)["attempts"][1]["resumed_from"]
    )
    wait_state(portal, job, "done")
    plain = subprocess.run(
        [sys.executable, "steps.py", "200"],
        cwd=portal.workdir,
        capture_output=True,
        text=True,
        check=True,
    )
    assert portal("logs", job).stdout == plain.stdout

    async def cancel_unknown() -> Any:
        async with Client(server) as client:
            return await client.call_tool("cancel", {"job": "nope"})

    refused = asyncio.run(cancel_unknown())
    assert refused.is_error
    text = refused.content[0].text  # type: ignore[union-attr]
    assert "no job 'nope': give a job id (j-...) or a job's name" in text, text
