"""Import cost of portal-spot-core and of the plugin manager, against the interpreter's own start-up
measured in the same run. Run: ``python benchmarks/bench_import.py``.

Each figure is the median over fresh interpreters (``-X importtime`` would add its own cost):
the time to import the module (and build the manager), measured inside the child with
perf_counter. Bytecode is written on a first, unmeasured run: an installed package has its
``.pyc`` files (pip compiles them), and a figure that includes compiling every module measures
the compiler, not Portal (uv installs without them, and ``PYTHONDONTWRITEBYTECODE`` keeps them
from being written).

Targets (issue 24): ``import portal.core`` well under the interpreter's start-up; the plugin
manager with every installed plugin loaded (what a ``portal`` command builds) <= 30 ms.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

RUNS = 15
#: label -> the code a fresh interpreter runs, timed from its first line.
CASES = [
    ("json (stdlib peer)", "import json"),
    ("portal.core", "import portal.core"),
    ("portal.core.plugins", "import portal.core.plugins"),
    (
        "plugin manager, no plugins",
        "import portal.core.plugins as p; p.get_plugin_manager(autoload=False)",
    ),
    (
        "plugin manager, every installed plugin",
        "import portal.core.plugins as p; p.Plugins.load().notice_sources()",
    ),
]
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def measure(code: str) -> float:
    timed = f"import time; t = time.perf_counter(); {code}; print(time.perf_counter() - t)"
    subprocess.run([sys.executable, "-c", timed], env=_ENV, capture_output=True, check=True)
    samples = []
    for _ in range(RUNS):
        out = subprocess.run(
            [sys.executable, "-c", timed], env=_ENV, capture_output=True, text=True, check=True
        )
        samples.append(float(out.stdout) * 1000)
    return statistics.median(samples)


def main() -> None:
    print(f"import cost (median of {RUNS} fresh interpreters, python {sys.version.split()[0]})")
    peer = measure("import json")
    for label, code in CASES:
        ms = measure(code)
        print(f"  {label:40s} {ms:7.1f} ms   {ms / peer:5.1f}x json")
    print("targets: portal.core well under start-up; every installed plugin loaded <= 30 ms")


if __name__ == "__main__":
    main()
