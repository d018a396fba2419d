"""Measuring the benchmarks' processes: wall time, the peak RSS of a process tree sampled with
psutil, how long a JVM lived in it, what the process reported; the memory of a long-running
server; and the statistics the benchmarks report (medians, percentiles, ratios)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness import ROOT

_T = TypeVar("_T")

RESULT_PREFIX = "BENCH_STAGE_RESULT "
"""A measured process reports its own figures as one line ``BENCH_STAGE_RESULT <json>``
(``bench/spark_stage.py``, ``bench/peer_upsert.py``, ``bench/engine_bench.py _apply``)."""


# --- sampling memory -------------------------------------------------------------------------------


class RssSampler:
    """The RSS of a process, or of it and all its descendants (``tree``), sampled every
    ``interval_s`` in a thread from :meth:`start` to :meth:`stop`: the peak (bytes), the number of
    samples, and when a ``java`` process was first and last seen among them (monotonic seconds)."""

    def __init__(self, pid: int, interval_s: float, *, tree: bool) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.tree = tree
        self.peak = 0
        self.samples = 0
        self.java_first: float | None = None
        self.java_last: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._done.is_set():
            try:
                procs = [root, *root.children(recursive=True)] if self.tree else [root]
            except psutil.NoSuchProcess:
                return
            total, java = 0, False
            for p in procs:
                try:
                    total += p.memory_info().rss
                    java = java or p.name() == "java"
                except psutil.NoSuchProcess:
                    if p is root:
                        return
            self.peak = max(self.peak, total)
            self.samples += 1
            if java:
                now = time.monotonic()
                self.java_first = self.java_first or now
                self.java_last = now
            self._done.wait(self.interval_s)


def status_kib(pid: int, key: str) -> int | None:
    """A ``/proc/<pid>/status`` figure in KiB (``VmRSS``, ``VmHWM``); ``None`` when absent."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


class ServerMemory:
    """A long-running server's memory around a block: its RSS sampled every 0.2 s
    (:class:`RssSampler`) and its ``VmHWM``, reset at the start where the kernel lets us
    (``echo 5 > /proc/<pid>/clear_refs``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._sampler = RssSampler(pid, 0.2, tree=False)
        self.hwm_reset = False

    def __enter__(self) -> ServerMemory:
        try:
            Path(f"/proc/{self.pid}/clear_refs").write_text("5")
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False
        self.rss_before = (status_kib(self.pid, "VmRSS") or 0) * 1024
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sampler.stop()
        self.hwm = (status_kib(self.pid, "VmHWM") or 0) * 1024
        self.rss_after = (status_kib(self.pid, "VmRSS") or 0) * 1024

    def figures(self) -> dict[str, Any]:
        """GiB: the peak (the larger of the sampled peak and a reset ``VmHWM``), both apart, the
        RSS before and after; whether ``VmHWM`` was reset; the number of samples."""
        gib = 2**30
        peak = self._sampler.peak
        return {
            "peak_gib": round(max(peak, self.hwm if self.hwm_reset else 0) / gib, 3),
            "sampled_peak_gib": round(peak / gib, 3),
            "vm_hwm_gib": round(self.hwm / gib, 3),
            "vm_hwm_reset_before": self.hwm_reset,
            "rss_before_gib": round(self.rss_before / gib, 3),
            "rss_after_gib": round(self.rss_after / gib, 3),
            "samples": self._sampler.samples,
        }


# --- measuring a process ---------------------------------------------------------------------------


@dataclass
class Measured:
    """One measured process: wall time, peak RSS of its tree, and what it reported."""

    label: str
    wall_s: float
    peak_rss: int
    returncode: int
    spark_s: float | None
    """How long a JVM (spark-submit) was alive in the tree; ``None``: no Spark started."""
    result: dict[str, Any] = field(default_factory=dict)
    load_avg: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "wall_s": round(self.wall_s, 3),
            "peak_rss_mib": round(self.peak_rss / 2**20, 1),
            "spark_s": None if self.spark_s is None else round(self.spark_s, 3),
            "load_avg_1m": self.load_avg,
            **({"result": self.result} if self.result else {}),
        }


def measure(label: str, cmd: list[str], env: dict[str, str], log_dir: Path, timeout_s: float = 6 * 3600) -> Measured:
    """Run ``cmd`` (in the checkout, output to ``<log_dir>/<label>.log``), sampling the RSS of it
    and all its descendants every 0.1 s; its last ``BENCH_STAGE_RESULT`` line is the result.
    Prints one line: wall seconds, peak RSS, and the job's seconds where it reported them.

    Raises:
        RuntimeError: the process failed (the message carries the tail of its log).
    """
    log = log_dir / f"{label}.log"
    with open(log, "wb") as out:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        sampler = RssSampler(proc.pid, 0.1, tree=True)
        sampler.start()
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        wall = time.monotonic() - start
        sampler.stop()
    text = log.read_text(errors="replace")
    if rc != 0:
        raise RuntimeError(f"{label} failed (exit code {rc}); log {log}:\n{text[-4000:]}")
    result = {}
    for line in text.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
    first, last = sampler.java_first, sampler.java_last
    spark_s = None if first is None or last is None else last - first
    m = Measured(label, wall, sampler.peak, rc, spark_s, result, round(os.getloadavg()[0], 2))
    print(
        f"  {label}: {wall:.1f} s wall, peak RSS {sampler.peak / 2**20:.0f} MiB"
        + (f", job {result['job_s']:.1f} s" if "job_s" in result else ""),
        flush=True,
    )
    return m


def summarize(runs: list[Measured], events: int | None) -> dict[str, Any]:
    """Repetitions of one measurement: every run, the medians of wall and job seconds, the
    highest peak RSS (MiB) and, given the ``events`` each run processed, events per second."""
    wall = statistics.median(m.wall_s for m in runs)
    jobs = [m.result["job_s"] for m in runs if m.result.get("job_s") is not None]
    job = statistics.median(jobs) if jobs else None
    out = {
        "runs": [m.as_dict() for m in runs],
        "wall_s": round(wall, 3),
        "job_s": None if job is None else round(job, 3),
        "peak_rss_mib": round(max(m.peak_rss for m in runs) / 2**20, 1),
    }
    if events:
        out["events"] = events
        out["events_per_s"] = round(events / wall, 1)
        if job:
            out["events_per_s_job"] = round(events / job, 1)
    return out


# --- statistics ------------------------------------------------------------------------------------------


def median_seconds(fn: Callable[[], _T], reps: int) -> tuple[float, list[float], _T | None]:
    """Median seconds of ``reps`` calls of ``fn``, every call's seconds, and the last result."""
    times: list[float] = []
    out = None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(round(time.perf_counter() - t0, 4))
    return round(statistics.median(times), 4), times, out


def percentile(values: list[float], q: float) -> float:
    """The value at the rank ``q`` (0..1) of ``values`` sorted (nearest rank, rounded down)."""
    v = sorted(values)
    return v[min(len(v) - 1, int(len(v) * q))]


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median ``wall_s`` (all figures of one run, not medians of each; of an even
    number, the faster of the middle two)."""
    return sorted(runs, key=lambda r: r["wall_s"])[(len(runs) - 1) // 2]


def ratio(a: float | None, b: float | None, digits: int = 3) -> float | None:
    """``a / b`` rounded, ``None`` when either is missing or zero."""
    return round(a / b, digits) if a and b else None
