"""mpmath: its own contexts and constants travel by reference, their settings as process state,
numbers and matrices exactly whatever the precision while they load. Unit round-trips, and a
program paused at a raised precision and resumed digit for digit (it failed to resume before:
the contexts' cycle could not be loaded again)."""

from __future__ import annotations

import pickle
import random
from pathlib import Path
from typing import Any

import pytest

mpmath = pytest.importorskip("mpmath")

from _harness import CORPUS, paused_against_plain  # noqa: E402

from portal.capture._plugins import load_reducers  # noqa: E402
from portal.capture.pickler import dumps, resolve_reducers  # noqa: E402


@pytest.fixture(autouse=True)
def precision() -> Any:
    saved = mpmath.mp.prec
    yield
    mpmath.mp.prec = saved


def round_trip(obj: Any, *, load_at_prec: int | None = None) -> Any:
    data, buffers, _ = dumps(obj, namespaces={}, reducers=resolve_reducers(load_reducers()))
    if load_at_prec is not None:
        mpmath.mp.prec = load_at_prec  # as a resume loads: before the settings are restored
    return pickle.loads(data, buffers=buffers)


def test_the_contexts_and_constants_are_mpmaths_own() -> None:
    back = round_trip({"mp": mpmath.mp, "iv": mpmath.iv, "fp": mpmath.fp, "pi": mpmath.pi})
    assert back["mp"] is mpmath.mp and back["iv"] is mpmath.iv and back["fp"] is mpmath.fp
    assert back["pi"] is mpmath.pi


def test_numbers_and_matrices_come_back_exact_whatever_the_precision_at_load() -> None:
    mpmath.mp.dps = 40
    x, z = mpmath.mpf(2) / 3, mpmath.mpc(1, 1) / 3
    m = mpmath.mp.matrix([[x, 1], [2, z]])
    back = round_trip({"x": x, "z": z, "m": m}, load_at_prec=53)
    mpmath.mp.dps = 40
    assert back["x"] == x and back["z"] == z and type(back["x"]) is mpmath.mp.mpf
    assert type(back["m"]) is mpmath.mp.matrix and back["m"][0, 0] == x and back["m"][1, 1] == z
    assert (back["m"] * mpmath.mpf("1.0001"))[0, 0] == (m * mpmath.mpf("1.0001"))[0, 0]


def test_a_context_of_the_programs_own_and_its_numbers_are_not_taken_for_mpmaths() -> None:
    from portal.capture.extensions import mpmath_state

    ctx = mpmath.MPContext()
    for reduce, value in (
        (mpmath_state._reduce_context, ctx),
        (mpmath_state._reduce_mpf, ctx.mpf(1)),
        (mpmath_state._reduce_matrix, ctx.matrix(2)),
    ):
        assert reduce(value) is NotImplemented  # by value, as any object of the program's


def test_a_program_at_a_raised_precision_pauses_and_resumes_digit_for_digit(
    tmp_path: Path, rng: random.Random
) -> None:
    at = rng.randrange(13, 26)  # after the precision was raised: it must come back raised
    run = paused_against_plain(
        tmp_path, CORPUS / "mpmath" / "precision.py", ready=lambda out: out.count(b"\n") > at
    )
    assert run.out == run.plain.stdout, (at, run.err.decode()[-2000:])
    assert run.out.endswith(b" 40 True True\n")
