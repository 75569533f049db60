"""The serializer test docs/plugins.md shows, whole, runs and passes the contract as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "plugins.md"


def test_the_guides_serializer_test_passes(tmp_path: Path) -> None:
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(r"A serializer's test, whole:\n\n```python\n(.*?)```", text, re.DOTALL)
    assert found, "docs/plugins.md lost its serializer test sample"
    sample = tmp_path / "test_fractions_sample.py"
    sample.write_text(found.group(1), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(sample)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"\b\d+ passed", done.stdout), done.stdout[-2000:]
