"""The real frameworks' training loops, paused at random moments mid-epoch and resumed in a new
process: Hugging Face ``Trainer.train()``, Lightning ``Trainer.fit()`` and a loop over
``accelerator.prepare(loader)``, and HF's with ``report_to="tensorboard"`` (a SummaryWriter: a
writer thread and its queue), from the registry (pinned in noxfile.py's ``FRAMEWORK_PINS``,
installed after the local CPU torch so no CUDA build is pulled; Python 3.11 only, where that torch
is). The programs (``corpus/frameworks``) are written in the shape people use them: a model from
a config, synthetic data, gradient accumulation, an LR scheduler, the frameworks' own logs and
checkpoints, a callback of the script's.

Each moment: the uninterrupted run is the reference; a run is paused (a node's request with a
120 s or a 20 s deadline, or SIGTERM) once a random number of steps is out plus a random
fraction of a step, while the framework's loop runs; the resume continues it in a new process.
Checked: the pause came while training ran, its stdout (the loss at every step, the final
weights' digest) is the reference's byte for byte, and every file the framework wrote (its
checkpoints' tensors, optimizer and scheduler states, RNG states, logs) equals the reference's.

Cost: a run takes 5-10 s (imports), a moment three runs. CI runs a seeded sample: one framework,
one moment (``PORTAL_TEST_SEED`` reproduces); ``PORTAL_FRAMEWORKS_ALL=1`` runs every framework
with ``PORTAL_FRAMEWORK_MOMENTS`` moments (default 10), and ``PORTAL_FRAMEWORKS_REPORT=FILE``
writes the figures (notices, paused while training ran, seconds to pause, identical) as JSON.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from _harness import (
    CORPUS,
    EXIT_PAUSED,
    connect,
    resume_noted,
    runtime,
    short_dir,
    tensorboard_scalars,
)

PROGRAMS = CORPUS / "frameworks"
SEED = int(os.environ.get("PORTAL_TEST_SEED") or random.SystemRandom().randrange(1 << 30))
ALL = os.environ.get("PORTAL_FRAMEWORKS_ALL") == "1"
MOMENTS = int(os.environ.get("PORTAL_FRAMEWORK_MOMENTS", "10" if ALL else "1"))


class Framework(NamedTuple):
    name: str
    folder: str  # the program's, under corpus/frameworks
    modules: tuple[str, ...]  # what must be importable
    args: tuple[str, ...]  # the program's arguments (a per-step delay first)
    steps: int  # lines a whole run prints per step, in all
    step_line: bytes  # how a step's line starts
    artifacts: tuple[str, ...]  # folders the framework writes


FRAMEWORKS = [
    Framework("hf_trainer", "hf_trainer", ("transformers",), ("0.05",), 25, b"log ", ("out",)),
    # report_to tensorboard: a SummaryWriter (a writer thread and its queue) in the trainer
    Framework(
        "hf_trainer_tensorboard",
        "hf_trainer",
        ("transformers", "tensorboard"),
        ("0.05", "tensorboard"),
        25,
        b"log ",
        ("out", "tb"),
    ),
    Framework(
        "lightning_fit",
        "lightning_fit",
        ("lightning",),
        ("0.03",),
        48,
        b"batch ",
        ("logs", "ckpts"),
    ),
    Framework(
        "accelerate_loop", "accelerate_loop", ("accelerate",), ("0.02",), 39, b"step ", ("state",)
    ),
]
_CHOSEN = {f.name for f in FRAMEWORKS} if ALL else {random.Random(SEED).choice(FRAMEWORKS).name}
REPORT: list[dict[str, Any]] = []


def _skip(framework: Framework) -> str | None:
    if sys.version_info[:2] != (3, 11):
        return "the frameworks run on Python 3.11 only (the local CPU torch's)"
    for module in ("torch", *framework.modules):
        if importlib.util.find_spec(module) is None:
            return (
                f"{module} is not installed: pip install torch==2.13.0 first (the CPU build), "
                "then noxfile.py's FRAMEWORK_PINS"
            )
    if framework.name not in _CHOSEN:
        return (
            f"not in this run's sample (seed {SEED}: {sorted(_CHOSEN)}); "
            "PORTAL_FRAMEWORKS_ALL=1 runs every framework"
        )
    return None


def _env() -> dict[str, str]:
    # Offline and quiet: nothing may reach a hub, and no telemetry.
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TENSORBOARD_LOGGING_DIR": "tb",  # HF's default names the run by the clock
    }


def _job(framework: Framework, where: Path) -> Path:
    job = where / framework.name
    shutil.copytree(PROGRAMS / framework.folder, job)
    return job


def _stdout(raw: bytes) -> bytes:
    """stdout without the one line that holds wall times (HF's closing train_runtime dict)."""
    return b"".join(line for line in raw.splitlines(True) if b"train_runtime" not in line)


# -- comparing what the frameworks wrote -----------------------------------------------------


def _same_value(a: Any, b: Any, where: str) -> list[str]:
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        ):
            return [f"{where}: tensors differ"]
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(map(str, a)) != sorted(map(str, b)):
            return [f"{where}: keys differ ({sorted(map(str, a))} != {sorted(map(str, b))})"]
        return [d for k in a for d in _same_value(a[k], b[k], f"{where}[{k!r}]")]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [f"{where}: lengths differ"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _same_value(x, y, f"{where}[{i}]")
        ]
    if hasattr(a, "__dict__") and type(a) is type(b) and not isinstance(a, type):
        return _same_value(vars(a), vars(b), where)
    try:
        same = bool(a == b)
    except Exception:
        same = repr(a) == repr(b)
    return [] if same else [f"{where}: {a!r} != {b!r}"]


def _load(path: Path) -> Any:
    import torch

    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    if path.suffix in (".pt", ".pth", ".bin", ".ckpt"):
        return torch.load(path, weights_only=False, map_location="cpu")
    if path.suffix == ".json":
        return json.loads(path.read_text())
    return path.read_bytes()


def _same_artifacts(reference: Path, resumed: Path, folders: tuple[str, ...]) -> list[str]:
    """How the files under ``folders`` differ between two runs' directories (a path naming the
    run's own directory counts as the same)."""
    differences = []
    for folder in folders:
        a, b = reference / folder, resumed / folder
        names_a = sorted(str(p.relative_to(a)) for p in a.rglob("*") if _compared(p))
        names_b = sorted(str(p.relative_to(b)) for p in b.rglob("*") if _compared(p))
        events_a, events_b = _events(a), _events(b)
        if events_a != events_b:
            differences.append(f"{folder}: TensorBoard events differ")
        if not names_a and not events_a:
            differences.append(f"{folder}: the reference wrote nothing")
        if names_a != names_b:
            differences.append(f"{folder}: files differ: {names_a} != {names_b}")
            continue
        for name in names_a:
            differences += _same_value(
                _relative(_load(a / name), reference),
                _relative(_load(b / name), resumed),
                f"{folder}/{name}",
            )
    return differences


def _compared(path: Path) -> bool:
    """A file compared by its contents: an event file is named by its writer's clock, host and
    pid, and holds wall times (compared by :func:`_events`)."""
    return path.is_file() and not path.name.startswith("events.out.tfevents.")


_TIMINGS = ("train_runtime", "_per_second")


def _events(folder: Path) -> list[tuple[str, str, int, float]]:
    """Every scalar a folder's TensorBoard event files hold, wall times left out."""
    if not any(folder.rglob("events.out.tfevents.*")):
        return []
    return tensorboard_scalars(folder, _TIMINGS)[1]


def _relative(value: Any, root: Path) -> Any:
    """``value`` with every string naming a path under ``root`` made relative to it."""
    if isinstance(value, str):
        return value.replace(str(root), "<job>")
    if isinstance(value, dict):
        return {k: _relative(v, root) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (
            type(value)(_relative(v, root) for v in value)
            if type(value) in (list, tuple)
            else value
        )
    return value


# -- one moment ------------------------------------------------------------------------------


class Moment(NamedTuple):
    after_steps: int
    settle: float
    how: str  # "node-120", "node-20" or "sigterm"


def _moments(framework: Framework) -> list[Moment]:
    """Random moments that leave the training time to pause in: the notice comes at most two
    steps' sleep after the step it waits for, with at least 0.3 s of steps still to run (a
    notice that came as the loop ended, 33 of accelerate's 39 steps of 20 ms and 0.17 s after,
    paused after the last step: no pause while training, though nothing was wrong)."""
    rng = random.Random(f"{SEED}:{framework.name}")
    hows = ["node-120", "node-20", "sigterm"]
    step = float(framework.args[0])  # each program's sleep per step, its first argument
    last = framework.steps - 4 - math.ceil(0.3 / step)
    return [
        Moment(rng.randint(2, last), round(rng.uniform(0, 2 * step), 3), rng.choice(hows))
        for _ in range(MOMENTS)
    ]


def _steps(out: bytes, framework: Framework) -> int:
    return sum(line.startswith(framework.step_line) for line in out.splitlines())


def _pause(framework: Framework, job: Path, moment: Moment) -> tuple[bytes, dict[str, Any], str]:
    """Run under the runtime; ask for the pause at the moment; the output before the pause,
    the event that ended the attempt and the checkpoint."""
    work = short_dir()
    ckpt, sock = f"{work}/ck.portal", f"{work}/ctl.sock"
    proc = subprocess.Popen(
        runtime("run", "--checkpoint", ckpt, "--control", sock, "train.py", *framework.args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=job,
        env=_env(),
        bufsize=0,  # lines read one at a time leave the rest to communicate() (see _harness)
    )
    assert proc.stdout is not None
    try:
        control = connect(proc, sock, timeout=120)
        assert control is not None, proc.communicate()[1].decode()[-3000:]
        out = b""
        while _steps(out, framework) < moment.after_steps:
            line = proc.stdout.readline()
            assert line, (out.decode()[-2000:], proc.communicate()[1].decode()[-3000:])
            out += line
        time.sleep(moment.settle)
        if moment.how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            control.pause(within=float(moment.how.partition("-")[2]))
        events = control.events_until({"paused", "abandoned", "failed"}, timeout=150)
        control.close()
        rest, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == EXIT_PAUSED, (events, err.decode()[-3000:])
    return out + rest, events[-1], ckpt


@pytest.mark.frameworks
@pytest.mark.parametrize("framework", FRAMEWORKS, ids=[f.name for f in FRAMEWORKS])
def test_a_framework_paused_mid_epoch_resumes_identical(
    framework: Framework, tmp_path: Path
) -> None:
    skip = _skip(framework)
    if skip is not None:
        pytest.skip(skip)
    reference = _job(framework, tmp_path / "reference")
    plain = subprocess.run(
        [sys.executable, "train.py", *framework.args],
        cwd=reference,
        env=_env(),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert plain.returncode == 0, plain.stderr.decode()[-3000:]
    expected = _stdout(plain.stdout)
    assert _steps(expected, framework) == framework.steps
    failures = []
    for i, moment in enumerate(_moments(framework)):
        job = _job(framework, tmp_path / f"moment{i}")
        before, paused, checkpoint = _pause(framework, job, moment)
        during = 0 < _steps(before, framework) < framework.steps
        after, _, _ = resume_noted(checkpoint, job, _env())
        (job.parent / "paused.out").write_bytes(before)  # kept with the test's files
        (job.parent / "resumed.out").write_bytes(after)
        identical = _stdout(before + after) == expected
        differences = _same_artifacts(reference, job, framework.artifacts)
        REPORT.append(
            {
                "framework": framework.name,
                "moment": moment._asdict(),
                "paused_at": paused["paused_at"],
                "paused_while_training": during,
                "seconds_to_pause": round(paused["seconds_to_safe_point"], 3),
                "identical": identical and not differences,
            }
        )
        if not (during and identical and not differences):
            first = next(
                (
                    (a, b)
                    for a, b in zip(
                        expected.splitlines(), _stdout(before + after).splitlines(), strict=False
                    )
                    if a != b
                ),
                None,
            )
            failures.append((moment, paused["paused_at"], during, first, differences[:5]))
    _write_report()
    assert not failures, (f"seed {SEED}", failures)


def _write_report() -> None:
    target = os.environ.get("PORTAL_FRAMEWORKS_REPORT")
    if target:
        Path(target).write_text(json.dumps({"seed": SEED, "moments": REPORT}, indent=1))


@pytest.mark.frameworks
def test_accelerate_s_state_travels_when_no_object_holds_it(tmp_path: Path) -> None:
    """accelerate keeps its state in class-level dicts; a program that holds none of its state
    objects (accelerate's logging asks the class) still has it after a resume."""
    framework = Framework(
        "accelerate_state", "accelerate_state", ("accelerate",), (), 40, b"step ", ()
    )
    if sys.version_info[:2] != (3, 11) or importlib.util.find_spec("accelerate") is None:
        pytest.skip("accelerate (with the local CPU torch) runs on Python 3.11 only")
    job = _job(framework, tmp_path)
    plain = subprocess.run(
        [sys.executable, "train.py"], cwd=job, env=_env(), capture_output=True, timeout=300
    )
    assert plain.returncode == 0, plain.stderr.decode()[-3000:]
    before, _, checkpoint = _pause(framework, job, Moment(10, 0.0, "node-120"))
    after, err, _ = resume_noted(checkpoint, job, _env())
    assert before + after == plain.stdout
    assert b"INFO [RANK 0] on cpu, after the loop" in err
