"""A workload that fails on purpose, for the failure-handling tests (not offered to users: it lives in tests/).

``knobs.fault`` picks what happens at measured step ``knobs.fault_step``: ``none`` (a good trial, its speed set by
``knobs.work``), ``oom`` (a real allocation far beyond memory), ``nan`` (the loss really becomes NaN), ``raise``,
``segfault`` (a real invalid read), ``abort``, ``sigkill`` (what the kernel's OOM killer does), ``hang``, ``exit``,
``worker_hang`` (the step waits for a child forked from the trial, as a DataLoader's worker is, that hangs),
``gpu_only`` (refused by ``check`` on a CPU: skipped before launch), ``check_raise`` (``check`` itself raises),
``orphan`` (a good trial whose ``build`` starts ``sleep 300`` in a new session, its pid appended to the file
``workload.orphans_to``), ``daemon`` (the same with a daemon forked twice, no exec),
``bimodal`` (a good trial whose steps from ``fault_step`` on wait ``BIMODAL_S`` more every other step: two speeds,
flagged ``step_bimodal``, as on a shared CPU), ``slow`` (step ``fault_step`` alone waits ``SLOW_S``, then the
trial goes on: a stall that ends). The trial reports ``env_probe``, the value of ``KNOB_PROBE`` it saw, and
``queues_probe`` the value of ``CUDA_DEVICE_MAX_CONNECTIONS`` (``knobs.cuda_connections``).

A good step multiplies ``workload.reps`` times, then waits ``workload.wait_ms`` (a step blocked on I/O or a device;
0: no wait); with ``workload.hold_until`` (a path) each step also waits until that file exists, so a test keeps a
trial running until it has seen what it waits for. Planted regressions for the nightly gate (``plant:``; not knobs,
so not part of a configuration's identity, like a slower torch build): ``plant.slowdown: 0.1`` makes each step's
wait 1/0.9 as long (without a wait: ``reps * 0.1 / 0.9`` more multiplications of the same size), so throughput
really drops to 0.9x. ``plant.noise: 0.2`` makes every trial's wait (or work) per step 1.2x or 0.8x (even / odd
trial numbers): noisy, unchanged on average.
A wait keeps its length on a loaded machine, where the CPU share of a computing step does not.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time
from typing import TYPE_CHECKING, Any

from workloads.base import DeviceInfo, Workload

if TYPE_CHECKING:  # imported by build(): the sweeper reads check() before launch without paying torch's import
    import torch

BIMODAL_S = 0.05  # what a slow step of fault=bimodal waits more: 10x a step of workload.wait_ms=5
SLOW_S = 2.0  # what step fault_step of fault=slow waits: past a 1 s measure.stall_s, then the trial goes on


def _hang(marker: str | None) -> None:
    """Create ``marker`` (a test waits for it, not for a guessed time), then hang."""
    if marker:
        open(marker, "w").close()
    time.sleep(3600)


def _hang_in_worker() -> None:
    """A forked child's hang (its frame names it in the stacks its trial's log gets)."""
    time.sleep(3600)


def _wait_for_worker() -> None:
    """Fork a child that hangs and wait for it, as a step waits for a DataLoader worker's batch."""
    pid = os.fork()
    if pid == 0:
        try:
            _hang_in_worker()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def check(cfg: dict[str, Any], device: DeviceInfo) -> str | None:
    if cfg["knobs"]["fault"] == "check_raise":
        raise RuntimeError("planted failure in check()")
    if cfg["knobs"]["fault"] == "gpu_only" and device.kind != "cuda":
        return "fault=gpu_only needs a GPU"
    return None


def build(cfg: dict[str, Any], device: torch.device) -> Workload:
    import torch

    knobs = cfg["knobs"]
    fault, at = knobs["fault"], int(knobs["fault_step"])
    n = int(knobs["work"])
    reps, wait_s = _work(cfg)
    hold = cfg["workload"].get("hold_until")
    if fault == "orphan":  # a helper process in a session of its own: outside the trial's process group
        import subprocess

        helper = subprocess.Popen(["sleep", "300"], start_new_session=True)
        with open(cfg["workload"]["orphans_to"], "a", encoding="utf-8") as f:
            f.write(f"{helper.pid}\n")
    elif fault == "daemon":
        _daemon(cfg["workload"]["orphans_to"])
    a = torch.randn(n, n, device=device)
    count = [0]

    def step(_batch: Any) -> torch.Tensor:
        count[0] += 1
        for _ in range(reps - 1):
            a @ a
        loss = (a @ a).mean()
        if wait_s:
            time.sleep(wait_s)
        while hold and not os.path.exists(hold):  # held running until the test creates the file
            time.sleep(0.02)
        if count[0] >= at:
            loss = _planted(fault, count[0], at, loss, cfg, device)
        return loss

    return Workload(
        step=step,
        samples_per_step=1.0,
        flops_per_step=2.0 * n**3 * reps,
        extra_metrics=lambda: {
            "env_probe": os.environ.get("KNOB_PROBE"),
            "queues_probe": os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS"),
        },
    )


def _planted(fault: str, step: int, at: int, loss: torch.Tensor, cfg: dict[str, Any], device: Any) -> torch.Tensor:
    """What ``fault`` does at measured step ``step`` (from ``at`` on): the loss, or the failure itself."""
    import torch

    if fault == "oom":
        torch.empty(1 << 50, dtype=torch.uint8, device=device)  # 1 PiB: the allocator really fails
    elif fault == "nan":
        loss = torch.log(loss - loss - 1.0)  # log(-1) = NaN, computed for real
    elif fault == "raise":
        raise ValueError(f"planted failure at step {step}")
    elif fault == "segfault":
        ctypes.string_at(0)  # read address 0: SIGSEGV
    elif fault == "abort":
        os.abort()
    elif fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif fault == "hang":
        _hang(cfg["workload"].get("hanging_to"))
    elif fault == "worker_hang":
        _wait_for_worker()
    elif fault == "exit":
        os._exit(3)
    elif fault == "bimodal" and step % 2:
        time.sleep(BIMODAL_S)
    elif fault == "slow" and step == at:
        time.sleep(SLOW_S)
    return loss


def _daemon(pids_file: str) -> None:
    """A daemon the classic way, without exec: fork, a new session, fork again, the middle process exits; the
    daemon (an orphan now, its environment the forkserver's) sleeps. Its pid is appended to ``pids_file``."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, f"{os.getpid()}\n".encode())
            time.sleep(300)
        os._exit(0)
    os.close(w)
    os.waitpid(middle, 0)
    pid = os.read(r, 64).decode()
    os.close(r)
    with open(pids_file, "a", encoding="utf-8") as f:
        f.write(pid)


def _work(cfg: dict[str, Any]) -> tuple[int, float]:
    """(multiplications, seconds waited) per step: ``workload.reps`` and ``workload.wait_ms`` with the planted
    slowdown and noise applied to the wait when there is one, else to the multiplications."""
    reps, wait_s = int(cfg["workload"].get("reps") or 1), float(cfg["workload"].get("wait_ms") or 0.0) / 1e3
    plant = cfg.get("plant") or {}
    slowdown, noise = float(plant.get("slowdown") or 0.0), float(plant.get("noise") or 0.0)
    if not 0 <= slowdown < 1 or not 0 <= noise < 1:
        raise ValueError(f"plant.slowdown={slowdown} and plant.noise={noise} must lie in [0, 1)")
    if noise:
        number = json.loads((cfg.get("trial") or {}).get("context") or "{}").get("number") or 0
        factor = 1 + noise if number % 2 == 0 else 1 - noise
        reps, wait_s = (reps, wait_s * factor) if wait_s else (round(reps * factor), 0.0)
    if wait_s:
        return reps, wait_s / (1 - slowdown)
    extra = round(reps * slowdown / (1 - slowdown))
    if slowdown and abs(reps / (reps + extra) - (1 - slowdown)) > 0.005:
        raise ValueError(
            f"plant.slowdown={slowdown} is not a whole number of extra multiplications with "
            f"workload.reps={reps}; raise workload.reps (e.g. 100)"
        )
    return reps + extra, 0.0
