"""Import cost of portal-core, against the interpreter's own start-up measured in the same run.

Each figure is the median over fresh interpreters (``-X importtime`` would add its own cost):
the time to import the module minus nothing else, measured inside the child with perf_counter.
Target: ``import portal.core`` under 150 ms on the project's 2-core machines.
"""

from __future__ import annotations

import statistics
import subprocess
import sys

RUNS = 15
MODULES = [
    ("json (stdlib peer)", "json"),
    ("portal.core", "portal.core"),
    ("portal.core.plugins", "portal.core.plugins"),
    ("portal.core + plugin manager built", "portal.core.plugins"),
]


def measure(module: str, build: bool) -> float:
    code = (
        "import time; t = time.perf_counter(); import "
        + module
        + (("; " + module + ".get_plugin_manager(autoload=False)") if build else "")
        + "; print(time.perf_counter() - t)"
    )
    samples = []
    for _ in range(RUNS):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        samples.append(float(out.stdout) * 1000)
    return statistics.median(samples)


def main() -> None:
    print(f"import cost (median of {RUNS} fresh interpreters, python {sys.version.split()[0]})")
    peer = measure("json", False)
    for label, module in MODULES:
        ms = measure(module, label.endswith("built"))
        print(f"  {label:40s} {ms:7.1f} ms   {ms / peer:5.1f}x json")
    print("target: portal.core < 150 ms")


if __name__ == "__main__":
    main()
