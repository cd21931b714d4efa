"""A CPU sweep's fresh Inductor cache, warmed by a tiny compile while its first trials run.

On the CPU, the first ``torch.compile`` into a fresh ``TORCHINDUCTOR_CACHE_DIR`` builds, once, what every later
compile finds there (Inductor's C++ pieces); the sweep's first compiled trial paid it inside its compile. Recorded
2-core CPU sweeps of four models of a user's own (torch 2.14.1, 2026-12-07): the first cold compile 7-35 s, later
cold ones of other shapes 2-15 s (a click model 35.4 s, then 14.3 and 15.0). A tiny function's compile into a
fresh cache (~9 s with torch's import) took a 6-layer MLP's first compile from 17-22 s to 10-11 s. On the H100's
recorded sweeps the first cold compile was no longer than the later ones (ResNet-50 29.4 s, then 29.1 and 29.7;
the ViT 24.4, then 24.0-25.4): no one-time part worth a process beside the baseline there, so only CPU sweeps
warm.

:func:`start` runs ``python -m sweeper.trial.warm_cache`` beside the sweep (niced, one thread, one compile worker:
the trial keeps the cores its thread count was chosen for, ``sweeper.trial.threads``) when the trials run on the
CPU, the space may compile, and the cache holds no ``MARKER`` (written once the tiny compile ended). Nothing waits
for it: a compiled trial that starts first builds the same pieces, behind Inductor's own file locks. A warm-up
that fails leaves the cache as it was (its output goes to ``LOG`` in the cache folder); the sweep's end stops one
still running (:func:`stop`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

MARKER = ".warmed"  # in the cache folder, once a warm-up's compile ended
LOG = "warm_cache.log"
COMPILE_KNOB = "knobs.compile"


def compiles(space: Any, defaults: Mapping[str, Any], knobs: type | None) -> bool:
    """Some trial of ``space`` (its ``params`` and ``fixed``, the workload's ``defaults`` under them) runs
    ``torch.compile``: the workload's knob class ``knobs`` is the package's training knobs (``knobs.compile`` is
    torch.compile's mode; a workload's own ``compile`` knob may mean anything) and a value other than "off" may
    run."""
    from workloads.spec.training import TrainingKnobs

    if not (isinstance(knobs, type) and issubclass(knobs, TrainingKnobs)):
        return False
    values: Iterable[Any] = getattr(space.params.get(COMPILE_KNOB), "choices", ())
    fixed = space.fixed.get(COMPILE_KNOB, defaults.get(COMPILE_KNOB))
    return any(str(v) != "off" for v in (*values, *([fixed] if COMPILE_KNOB not in space.params else [])))


def cache_dir(cfg: Mapping[str, Any]) -> Path | None:
    """The trials' Inductor cache (``compile_cache_dir``, as the trial config's ``env`` gives it), or None."""
    cache = (cfg.get("env") or {}).get("TORCHINDUCTOR_CACHE_DIR")
    return Path(cache) if cache else None


def start(
    cfg: Mapping[str, Any], space: Any, defaults: Mapping[str, Any], knobs: type | None
) -> subprocess.Popen | None:
    """The warm-up process, started where it pays (trials on the CPU that may compile into a cache not warmed
    yet; ``knobs``: the workload's knob class, ``trial_config.knob_class``); None elsewhere, or where it could not
    start."""
    cache = cache_dir(cfg)
    if str(cfg.get("device")) != "cpu" or cache is None or (cache / MARKER).exists():
        return None
    if not compiles(space, defaults, knobs):
        return None
    env = {**os.environ, **{k: str(v) for k, v in (cfg.get("env") or {}).items()}}
    env.update(OMP_NUM_THREADS="1", TORCHINDUCTOR_COMPILE_THREADS="1")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with open(cache / LOG, "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", __name__],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C at the sweep's terminal is the sweep's to handle: stop() ends it
            )
    except OSError:
        return None


def stop(proc: subprocess.Popen | None, wait_s: float = 5.0) -> None:
    """End a warm-up still running (the sweep ends)."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def main() -> None:
    """A tiny function's forward and backward compiled into ``TORCHINDUCTOR_CACHE_DIR``; ``MARKER`` written."""
    os.nice(19)
    import time

    import torch

    torch.set_num_threads(1)
    began = time.perf_counter()
    fn = torch.compile(lambda x: (x.sin() * 2 + 1).sum())
    fn(torch.randn(16, requires_grad=True)).backward()
    cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    (cache / MARKER).write_text(f"{time.perf_counter() - began:.2f}\n")
    print(f"warm_cache: {cache} warmed in {time.perf_counter() - began:.1f} s", flush=True)


if __name__ == "__main__":
    main()
