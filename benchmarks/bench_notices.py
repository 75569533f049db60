"""Notice latency and idle cost of each notice source, against its conformance fake.

For each provider: the fake runs in a child process (so the CPU measured in this process is the
source's alone); the source is built with its production defaults (AWS and Azure poll every 1 s,
GCP hangs on the metadata server) and polled by a watcher thread. A notice is made to appear on the
fake at a random moment; latency is from that moment to the notice reaching the caller of
``poll`` (both sides read CLOCK_MONOTONIC). Then the source watches an idle fake for a while:
requests per minute on the fake, CPU seconds per minute in this process.

    python benchmarks/bench_notices.py [--trials 10] [--idle-s 20]

Targets: <= 1 s for AWS and Azure (polling), <= 100 ms for GCP (hanging GETs).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

PROVIDERS = ("aws", "gcp", "azure")


def _serve(provider: str, conn: Connection) -> None:
    """The child process: runs one fake and obeys commands from the parent."""
    from portal.providers.aws.testing import FakeIMDS
    from portal.providers.azure.testing import FakeAzureMetadata
    from portal.providers.gcp.testing import FakeGCEMetadata

    fakes: dict[str, Callable[[], Any]] = {
        "aws": FakeIMDS,
        "gcp": FakeGCEMetadata,
        "azure": lambda: FakeAzureMetadata(vm_name="vm-1"),
    }
    with fakes[provider]() as fake:
        conn.send(fake.host if provider == "gcp" else fake.url)
        while True:
            command = conn.recv()
            if command == "notice":
                if provider == "aws":
                    fake.preempt(in_seconds=120 + random.random() * 1000, legacy=False)
                elif provider == "gcp":
                    fake.preempt()
                else:
                    fake.preempt(in_seconds=30)
                conn.send(time.monotonic())
            elif command == "reset":
                if provider in ("gcp", "azure"):  # AWS never withdraws: each trial is new
                    fake.cancel()
                conn.send(None)
            elif command == "count":
                conn.send(len(fake.requests))
            elif command == "stop":
                conn.send(None)
                return


def _make_source(provider: str, endpoint: str, dmi: str) -> Any:
    if provider == "aws":
        from portal.providers.aws.notices import AwsNoticeSource

        return AwsNoticeSource(endpoint=endpoint, dmi_dir=dmi)
    if provider == "gcp":
        from portal.providers.gcp.notices import GcpNoticeSource

        return GcpNoticeSource(host=endpoint, dmi_dir=dmi)
    from portal.providers.azure.notices import AzureNoticeSource

    return AzureNoticeSource(endpoint=endpoint, dmi_dir=dmi)


class Watcher:
    """Polls a source in a thread, as the node does, and timestamps what arrives."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.arrivals: list[tuple[float, Any]] = []
        self.errors = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                for notice in self.source.poll(1.0):
                    self.arrivals.append((time.monotonic(), notice))
            except Exception:
                self.errors += 1
                time.sleep(0.1)

    def wait_new(self, count: int, timeout_s: float = 10.0) -> float | None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if len(self.arrivals) >= count:
                return self.arrivals[count - 1][0]
            time.sleep(0.001)
        return None

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def bench_provider(provider: str, trials: int, idle_s: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_serve, args=(provider, child), daemon=True)
    process.start()
    endpoint = parent.recv()
    with tempfile.TemporaryDirectory() as dmi:
        source = _make_source(provider, endpoint, dmi)
        watcher = Watcher(source)
        try:
            time.sleep(1.5)  # first reads done, watchers hanging
            latencies: list[float] = []
            expected = 0
            for _ in range(trials):
                time.sleep(random.uniform(0.2, 1.2))  # a random phase against the poll interval
                parent.send("notice")
                appeared = parent.recv()
                expected += 1
                arrived = watcher.wait_new(expected)
                if arrived is not None:
                    latencies.append(arrived - appeared)
                parent.send("reset")
                parent.recv()
                if provider in ("gcp", "azure"):  # the withdrawal is reported too
                    expected += 1
                    watcher.wait_new(expected)
            parent.send("count")
            before_requests = parent.recv()
            cpu_before = time.process_time()
            time.sleep(idle_s)
            cpu = time.process_time() - cpu_before
            parent.send("count")
            requests = parent.recv() - before_requests
        finally:
            watcher.close()
            source.close()
            parent.send("stop")
            parent.recv()
            process.join(5)
    return {
        "provider": provider,
        "mode": "hanging GET" if provider == "gcp" else "poll 1 s",
        "latencies": latencies,
        "missed": trials - len(latencies),
        "req_per_min": requests * 60.0 / idle_s,
        "cpu_s_per_min": cpu * 60.0 / idle_s,
        "errors": watcher.errors,
    }


def bench_sigterm(trials: int) -> dict[str, Any]:
    from portal.providers.sigterm import SignalNoticeSource

    latencies: list[float] = []
    for _ in range(trials):
        source = SignalNoticeSource(enabled=True)
        watcher = Watcher(source)
        try:
            time.sleep(random.uniform(0.05, 0.2))
            sent = time.monotonic()
            os.kill(os.getpid(), signal.SIGTERM)
            arrived = watcher.wait_new(1, timeout_s=5)
            if arrived is not None:
                latencies.append(arrived - sent)
        finally:
            watcher.close()
            source.close()
    source = SignalNoticeSource(enabled=True)
    watcher = Watcher(source)
    cpu_before = time.process_time()
    time.sleep(5.0)
    cpu = time.process_time() - cpu_before
    watcher.close()
    source.close()
    return {
        "provider": "sigterm",
        "mode": "signal + pipe",
        "latencies": latencies,
        "missed": trials - len(latencies),
        "req_per_min": 0.0,
        "cpu_s_per_min": cpu * 60.0 / 5.0,
        "errors": watcher.errors,
    }


def _ms(values: list[float], q: float) -> str:
    if not values:
        return "-"
    ordered = sorted(values)
    index = min(len(ordered) - 1, round(q * (len(ordered) - 1)))
    return f"{ordered[index] * 1000:8.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--idle-s", type=float, default=20.0)
    parser.add_argument("--providers", default=",".join((*PROVIDERS, "sigterm")))
    args = parser.parse_args(argv)
    rows = []
    for provider in args.providers.split(","):
        print(f"measuring {provider} ...", file=sys.stderr, flush=True)
        if provider == "sigterm":
            rows.append(bench_sigterm(args.trials))
        else:
            rows.append(bench_provider(provider, args.trials, args.idle_s))
    print(
        f"\nnotice latency (ms, {args.trials} trials each) and idle cost "
        f"(over {args.idle_s:g} s, per minute), Python {sys.version.split()[0]}\n"
    )
    header = (
        f"{'source':8} {'mode':14} {'p50':>8} {'p95':>8} {'max':>8} {'mean':>8} "
        f"{'missed':>6} {'req/min':>8} {'CPU s/min':>9} {'errors':>6}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        lat = row["latencies"]
        mean = f"{statistics.mean(lat) * 1000:8.1f}" if lat else "-"
        print(
            f"{row['provider']:8} {row['mode']:14} {_ms(lat, 0.5)} {_ms(lat, 0.95)} "
            f"{_ms(lat, 1.0)} {mean} {row['missed']:6d} {row['req_per_min']:8.1f} "
            f"{row['cpu_s_per_min']:9.3f} {row['errors']:6d}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
