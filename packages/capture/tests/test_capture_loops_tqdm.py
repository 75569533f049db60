"""tqdm bars through a checkpoint's pickle, without torch (so on every supported Python): a
``for x in tqdm(...)`` loop's suspended generator comes back as a loop at the same count."""

from __future__ import annotations

import re
import sys

import pytest

tqdm_module = pytest.importorskip("tqdm")

from _harness import roundtrip  # noqa: E402

from portal.capture.extensions import loops  # noqa: E402


@pytest.mark.parametrize("taken", [0, 1, 4, 7])
def test_a_bar_loop_continues_at_its_count(capsys: pytest.CaptureFixture[str], taken: int) -> None:
    bar = tqdm_module.tqdm(
        iter(list(range(7))),
        total=7,
        file=sys.stderr,
        mininterval=0,
        miniters=1,
        bar_format="<{n_fmt}>",
    )
    gen = iter(bar)
    seen = [next(gen) for _ in range(taken)]
    capsys.readouterr()
    resumed = roundtrip(gen)
    assert capsys.readouterr().err == ""
    rest = list(gen)
    drawn = re.findall(r"<\d>", capsys.readouterr().err)
    assert list(resumed) == rest == list(range(taken, 7))
    assert seen == list(range(taken))
    assert re.findall(r"<\d>", capsys.readouterr().err) == drawn
    assert bar.n == 7 and bar.disable
    if taken:  # a loop not yet started comes back as tqdm's own generator
        assert isinstance(resumed, loops.BarIterator)
        assert resumed.bar.n == 7 and resumed.bar.disable  # closed at the end, as tqdm's


def test_a_loop_over_a_disabled_bar_is_its_iterator() -> None:
    bar = tqdm_module.tqdm(iter([1, 2, 3]), disable=True)
    gen = iter(bar)
    next(gen)
    resumed = roundtrip(gen)
    assert not isinstance(resumed, loops.BarIterator) and list(resumed) == [2, 3]
