"""One trial spanning N ranks: the isolated trial process is the launcher's agent, each rank builds and measures.

``execute(cfg)`` runs in the trial process (``sweeper.trial.child.execute`` hands over when ``distributed.strategy``
is not ``none``). It starts ``nproc`` ranks with PyTorch's own launcher (``elastic_launch``, the API behind
``torchrun``): c10d rendezvous on a free localhost port, no restarts. Each rank initialises the process group
(NCCL on GPU, gloo on CPU, with ``distributed.timeout_s`` as the collective timeout) and then runs the
single-process trial, ``sweeper.trial.local.execute``, on its own device: the same build and measurement. The
workload's ``build`` wraps the model through ``workloads.parallel.wrap``; it is reached through this module's
:func:`build` (as ``workload.module``), which also profiles a few more steps for ``comm_frac`` and reads the
wrapped module's settings back. The agent merges the ranks' metrics into one row.

Ending together: ranks are forked or spawned by the agent, so they stay in the trial's process group (the
runner's timeout kills them with it); each rank dies with its parent (PR_SET_PDEATHSIG) and on SIGTERM
(default action, so a rank blocked in a collective ends at once). When a rank fails, the launcher's monitor
stops the others and the agent re-raises that rank's exception, which ``sweeper.trial.child.classify`` classifies
(an OOM on one rank -> infeasible/oom). A rank that died without raising (signal, ``os._exit``) becomes
``RankExited``.

Metrics: ``throughput`` summed over ranks; ``step_ms_*`` of the slowest rank (``step_ms_p50`` = max over ranks,
``step_ms_p50_rank_min`` the fastest); ``peak_mem_bytes`` = max over ranks; ``world_size``; ``comm_frac`` =
the share of the wall time of ``comm_profile_steps`` extra steps (run under ``torch.profiler`` after the
measured window) during which a collective was running: union of NCCL kernel intervals on GPU, of gloo
collective intervals on CPU. Overlapped communication counts, so it is an upper bound on exposed comm time.
Pruning does not apply: ranks do not report intermediate values.

Failures are tested with a workload that plants them on one rank (``tests/faultload/rank_faults.py``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from sweeper.results.procs import pid_alive
from sweeper.trial import local
from sweeper.trial.proc import die_with_parent
from sweeper.trial.rank_metrics import comm_profile, merge
from sweeper.trial.threads import trial_threads
from workloads import parallel

# NVLink multicast (NVLS) off for NCCL, symmetric memory and NVSHMEM: on shared multi-GPU hosts a program using
# it can take the host's GPUs out of service, so ranks never use it.
RANK_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SHUTDOWN_TIMEOUT_S = 5  # after one rank fails, the others get SIGTERM, then SIGKILL after this long
# gloo's errors on a rank whose peer vanished (its socket closed): a consequence, never the cause
_PEER_LOST = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")


class RankExited(RuntimeError):
    """A rank ended without raising a Python exception (killed by a signal, ``os._exit``, a crash)."""


# ---------------------------------------------------------------- the agent (the isolated trial process)

def execute(cfg: dict[str, Any], measured: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run the trial on ``distributed.nproc`` ranks; returns the merged metrics (raises a rank's exception).
    ``measured(metrics)``: handed the ranks' measured windows, merged, once every rank has measured its window and
    before their profiles end (as :func:`sweeper.trial.local.execute` hands a single process's)."""
    s = parallel.settings(cfg.get("distributed"))
    kind = "cuda" if str(cfg["device"]).startswith("cuda") else "cpu"
    nproc = parallel.resolve_nproc(s, kind, torch.cuda.device_count() if kind == "cuda" else 0)
    if s.start_method == "fork":  # import once here rather than in every rank
        for name in ("torch.distributed.fsdp", "torch.profiler"):
            importlib.import_module(name)
    run_dir = _run_dir()
    started = time.time()
    relay = _Relay(run_dir, nproc, started, measured) if measured is not None else None
    try:
        args = (cfg, str(run_dir), relay is not None)
        results = launch(_rank_main, args, nproc, start_method=s.start_method, run_dir=run_dir)
        metrics = _merged(results, started)
    finally:
        if relay is not None:
            relay.stop()
        shutil.rmtree(run_dir, ignore_errors=True)
    return metrics


def _merged(per_rank: dict[int, dict[str, Any]], started: float) -> dict[str, Any]:
    """The ranks' metrics in one row, with the seconds from the agent's start to the first rank's (``launch_s``)."""
    metrics = merge(per_rank)
    metrics["launch_s"] = max(0.0, min(r["rank_started_at"] for r in per_rank.values()) - started)
    metrics.pop("rank_started_at", None)
    return metrics


class _Relay(threading.Thread):
    """In the agent: hands the ranks' measured windows (``measured-<rank>.pkl`` in the run folder, each written by
    its rank before its profile), merged as the final row is, to ``measured`` once every rank has written its own,
    so that a profile the sweep's budget cuts leaves the window measured (``sweeper.trial.isolate``)."""

    def __init__(self, run_dir: Path, nproc: int, started: float, measured: Callable[[dict[str, Any]], None]) -> None:
        super().__init__(name="measured-relay", daemon=True)
        self.files = [run_dir / f"measured-{rank}.pkl" for rank in range(nproc)]
        self.started, self.measured, self.done = started, measured, threading.Event()
        self.start()

    def run(self) -> None:
        while not self.done.wait(0.2):  # the agent waits on its ranks meanwhile: nothing else to wake on
            if all(f.exists() for f in self.files):
                per_rank = {rank: pickle.loads(f.read_bytes()) for rank, f in enumerate(self.files)}
                self.measured(_merged(per_rank, self.started))
                for f in self.files:  # handed over: gone (a rank may look)
                    f.unlink(missing_ok=True)
                return

    def stop(self) -> None:
        self.done.set()
        self.join(timeout=10)


def launch(fn: Callable[..., Any], args: tuple, nproc: int, *, start_method: str = "fork",
           run_dir: Path | None = None) -> dict[int, Any]:
    """Run ``fn(*args)`` on ``nproc`` local ranks through ``elastic_launch``; {rank: return value}.

    A failed rank raises its own exception here when it wrote a failure record (see ``_rank_main``), else
    :class:`RankExited`.
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    os.environ.update(RANK_ENV)  # the ranks inherit this process's environment
    # Ranks may be forked from here: torch must probe GPUs through NVML, never by initialising CUDA in the agent.
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    own_dir = run_dir is None
    run_dir = _run_dir() if own_dir else Path(run_dir)
    options: dict[str, Any] = {}
    if "shutdown_timeout" in {f.name for f in dataclasses.fields(LaunchConfig)}:
        options["shutdown_timeout"] = SHUTDOWN_TIMEOUT_S
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=nproc, run_id=uuid.uuid4().hex,
        rdzv_backend="c10d", rdzv_endpoint="127.0.0.1:0",  # port 0: the agent's store picks a free port
        rdzv_configs={"timeout": 120}, max_restarts=0, monitor_interval=0.1, start_method=start_method,
        logs_specs=DefaultLogsSpecs(log_dir=str(run_dir / "elastic")), **options)
    try:
        return elastic_launch(config, fn)(*args)
    except ChildFailedError as e:
        raise _root_cause(e, run_dir, nproc) from None
    finally:
        if own_dir:
            shutil.rmtree(run_dir, ignore_errors=True)


def _run_dir() -> Path:
    """A fresh scratch folder (failure records, the launcher's error files); removes those of dead agents.

    A trial killed on timeout cannot clean up after itself, so the next one does: folders are named after
    the agent's pid.
    """
    tmp = Path(tempfile.gettempdir())
    for old in tmp.glob("sweeper-dist-*-*"):
        pid = old.name.split("-")[2]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"sweeper-dist-{os.getpid()}-"))


def _root_cause(err: Any, run_dir: Path, world: int) -> BaseException:
    """The exception to raise for a failed launch: the first rank's own, rebuilt from its failure record."""
    records = {}
    for path in run_dir.glob("failure.*.pkl"):
        with open(path, "rb") as f:
            rec = pickle.load(f)
        records[rec["rank"]] = rec
    reported = {int(r): f for r, f in err.failures.items()}
    silent = [(f.timestamp, r, f) for r, f in reported.items() if r not in records]
    if silent:  # died without raising: a crash is never the consequence of a peer's exception
        _, rank, f = min(silent)
        how = f"signal {f.signal_name()}" if f.exitcode is not None and f.exitcode < 0 else f"exit code {f.exitcode}"
        return RankExited(f"rank {rank} of {world} ended ({how}) without a Python exception; see trial.log")
    if not records:
        return RankExited(f"ranks {sorted(reported)} of {world} failed without a record; see trial.log")
    rec = min(records.values(), key=lambda r: r["time"])
    silent_ranks = sorted(set(range(world)) - set(records))
    if silent_ranks and any(s in rec["message"] for s in _PEER_LOST):
        # gloo notices a dead peer before the launcher does: the first record is the survivor's, not the cause
        who = f"rank {silent_ranks[0]}" if len(silent_ranks) == 1 else f"one of ranks {silent_ranks}"
        first_line = (rec["message"].strip().splitlines() or [""])[0][:300]
        return RankExited(f"{who} of {world} ended without a Python exception (crash, signal or os._exit); "
                          f"rank {rec['rank']} then lost its connection: {first_line}")
    return _rebuild(rec, world)


def _rebuild(rec: dict[str, Any], world: int) -> BaseException:
    exc = None
    if rec.get("blob") is not None:
        try:
            exc = pickle.loads(rec["blob"])
        except Exception:  # noqa: BLE001 - fall back to name and message
            exc = None
    if exc is None:
        if rec["type"] == "NonFiniteLoss":
            from sweeper.trial.measure import NonFiniteLoss

            exc = NonFiniteLoss(rec["message"], rec.get("metrics") or {})
        else:
            exc = type(rec["type"], (RuntimeError,), {})(rec["message"])
    prefix = f"rank {rec['rank']} of {world}: "
    if exc.args and isinstance(exc.args[0], str):
        exc.args = (prefix + exc.args[0], *exc.args[1:])
    if hasattr(exc, "add_note"):
        exc.add_note(f"(raised on rank {rec['rank']} of {world})\n{rec['traceback']}".rstrip())
    return exc


# ---------------------------------------------------------------- one rank

def _rank_main(cfg: dict[str, Any], run_dir: str, hand_over: bool = False) -> dict[str, Any]:
    """Entry point of each rank (started by the launcher); returns this rank's metrics. ``hand_over``: the rank
    writes its measured window to ``run_dir`` before its profile (the agent's ``_Relay`` reads it)."""
    die_with_parent()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the launcher's stop must end a rank stuck in C++ at once
    rank = int(os.environ["RANK"])
    try:
        out = Path(run_dir) if hand_over else None
        return _run_rank(cfg, rank, int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]), out)
    except BaseException as exc:
        _write_failure(Path(run_dir), rank, exc)
        raise


def _run_rank(cfg: dict[str, Any], rank: int, world: int, local_rank: int, out: Path | None = None) -> dict[str, Any]:
    """Process group up, then the single-process trial (``sweeper.trial.local.execute``) on this rank's device.

    The workload is built through :func:`build` below (``workload.module``), which adds what only a rank
    does: the check that the model was wrapped, the comm profile and the wrapped module's settings.
    """
    import torch.distributed as dist

    started_at = time.time()
    s = parallel.settings(cfg.get("distributed"))
    device = _rank_device(str(cfg["device"]), local_rank, world)
    if cfg.get("cpus"):
        os.sched_setaffinity(0, [int(c) for c in cfg["cpus"]])
    threads = trial_threads(cfg.get("cpu_threads"), int(os.environ["LOCAL_WORLD_SIZE"]))  # ranks share the cores
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = s.backend if s.backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    dist.init_process_group(backend, timeout=dt.timedelta(seconds=float(s.timeout_s)),
                            device_id=device if device.type == "cuda" else None)
    wl = {**cfg["workload"], "module": __name__, "inner_module": cfg["workload"].get("module")}
    ours = {"rank": rank, "world_size": world, "rank_started_at": started_at}

    def window(metrics: dict[str, Any]) -> None:  # written whole, then named: the agent never reads half a file
        assert out is not None
        path = out / f"measured-{rank}.pkl"
        path.with_suffix(".tmp").write_bytes(pickle.dumps({**metrics, **ours}))
        os.replace(path.with_suffix(".tmp"), path)

    run = {**cfg, "device": str(device), "cpu_threads": int(threads), "workload": wl}
    metrics = local.execute(run, measured=window if out is not None else None)
    metrics.update(ours)
    dist.destroy_process_group()
    return metrics


def build(cfg: dict[str, Any], device: torch.device) -> Any:
    """A rank's workload: the configured one, checked to be wrapped, with comm profile and settings as extras."""
    import workloads

    wl = cfg["workload"]
    work = workloads.load(wl["name"], wl.get("inner_module")).build(cfg, device)
    model = parallel.wrapped_model()
    if model is None:
        raise RuntimeError(f"workload {wl['name']!r} does not support distributed.strategy="
                           f"{cfg['distributed']['strategy']}: its build never calls workloads.parallel.wrap")
    steps = int(parallel.settings(cfg.get("distributed")).comm_profile_steps)
    inner_extra = work.extra_metrics

    def extra() -> dict[str, Any]:  # read by measure() right after the measured window
        return {**inner_extra(), **comm_profile(work, device, steps), **parallel.describe(model)}

    work.extra_metrics = extra
    return work


def _rank_device(requested: str, local_rank: int, world: int) -> torch.device:
    """cuda:<local rank> (an explicit ``cuda:K`` is kept for a single rank); the CPU for every rank on CPU."""
    if not requested.startswith("cuda"):
        return torch.device("cpu")
    explicit = torch.device(requested)
    if world == 1 and explicit.index is not None:
        return explicit
    return torch.device("cuda", local_rank)


# ---------------------------------------------------------------- failure records

def _write_failure(run_dir: Path, rank: int, exc: BaseException) -> None:
    """What the agent needs to re-raise this rank's exception (written before the rank exits)."""
    blob: bytes | None
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:  # noqa: BLE001 - an exception that does not survive pickling goes by name and message
        blob = None
    tb = "".join(traceback.format_tb(exc.__traceback__)[-2:])
    rec = {"rank": rank, "time": time.time(), "blob": blob, "type": type(exc).__name__, "message": str(exc),
           "metrics": dict(getattr(exc, "metrics", None) or {}), "traceback": tb}
    tmp = run_dir / f".failure.{rank}.tmp"
    with open(tmp, "wb") as f:
        pickle.dump(rec, f)
    os.replace(tmp, run_dir / f"failure.{rank}.pkl")
