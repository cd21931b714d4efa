"""cuDNN's benchmark run while ``torch.compile`` compiles, instead of after it.

A compiled step with ``cudnn_benchmark`` on pays, the first time, the compile (CPU work: Dynamo, AOTAutograd,
Inductor) and then cuDNN's benchmark of each of the graph's convolutions (GPU work), one after the other. cuDNN's
benchmark cache is one per process, keyed by a convolution's shapes, strides, dtype and parameters, not by its
caller: an eager forward and backward of a copy of the model, run once in a thread while the compile runs, fills it,
and the compiled graph finds its algorithms chosen. The graph's first run waits for the thread (Dynamo's
end-of-compile callback joins it), so the two never benchmark on the GPU at once: a benchmark timed beside other
kernels could choose worse algorithms. On by default (``BY_DEFAULT``); the trial's row records the thread's
seconds (``prime_s``, ``prime_waited_s``: the cost model prices an eager twin's first step by them).

The copy (``copy.deepcopy``: its parameters, no optimizer state) lives while the thread runs; the thread writes no
``.grad`` (``torch.autograd.grad``) and touches neither the model nor its batch (a clone of the batch's inputs). The
peak memory the trial records leaves the priming out: the peak before it is kept (``peak_floor_bytes``) and the
device's peak counter restarts once the thread has ended. Anything the priming cannot do (a model that does not
copy, an out-of-memory) leaves the step as it was: the graph benchmarks its own convolutions. The copy draws from
the global random generators (a dropout layer's masks): the compiled steps after it see other random numbers than
they would have, as after any other extra forward. ``torch.compiler.is_compiling()`` is a flag of the process (torch
2.14): the copy's eager step sees it True while the step compiles, and a model that branches on it runs its
compiled branch in the copy.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)


# Compile modes whose compile runs nothing on the device: max-autotune's modes time their kernel choices on the GPU
# while they compile, and two benchmarks timed beside each other could both choose worse.
QUIET_MODES = ("default", "reduce-overhead")
# TrainStep(prime_cudnn=...)'s default. Like for like on an H100 (DeepLabV3-MobileNetV3, 512 px, batch 128, bf16,
# compile default, 2026-12-06, bench/cudnn_overlap.py --arms tool-serial tool, one fresh process and cold inductor
# cache each): the first step 123.2 s unprimed, 87.4 s primed (the compilers' seconds grew from 46.4 to 68.6: the
# copy's eager step takes the GIL between its operations; the thread 54.9 s, the graph waited 17.0 s); 430.9 and
# 429.8 img/s afterwards, 16.4 GiB peak both. The sweep's compiled start of that model then ran its first step in
# 95 s (111 s in the hand loop beside it, unprimed).
BY_DEFAULT = True
COMPILING = os.path.join("_dynamo", "convert_frame.py")  # a thread whose stack holds it waits on the compile lock


def wanted(model: nn.Module, compile_mode: str, device: torch.device, free_bytes: int | None = None) -> bool:
    """Priming pays where a model with convolutions compiled in a quiet mode runs on a GPU with cuDNN's benchmark
    on; never in a distributed trial (the copy of a wrapped or sharded model would run collectives on one rank),
    nor where the copy's parameters and buffers would take more than a quarter of the device's free memory."""
    if compile_mode not in QUIET_MODES or device.type != "cuda" or not torch.backends.cudnn.benchmark:
        return False
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return False
    if not any(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules()):
        return False
    size = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    free = torch.cuda.mem_get_info(device)[0] if free_bytes is None else free_bytes
    return size <= free / 4


class Primer:
    """One priming of cuDNN's benchmark cache: ``start(x, y)`` before the compiled step's first call, ``finish()``
    after it (also when the step raised)."""

    def __init__(self, model: nn.Module, loss_fn: Callable, enter: Callable[[], Any], device: torch.device) -> None:
        self.model, self.loss_fn, self.enter, self.device = model, loss_fn, enter, device
        self.thread: threading.Thread | None = None
        self.peak_floor_bytes = 0
        self.error: BaseException | None = None
        self.joined = False
        self.prime_s = self.waited_s = 0.0  # the thread's seconds; how long the compiled graph waited for it

    def start(self, x: Any, y: Any) -> bool:
        """Starts the thread; False (nothing started) where the end-of-compile callback or the copy is missing."""
        handler = getattr(getattr(torch._dynamo, "callback", None), "callback_handler", None)
        if handler is None or not hasattr(handler, "register_end_callback"):
            return False
        try:
            twin = copy.deepcopy(self.model)
        except Exception as e:  # noqa: BLE001 (a model that does not copy is trained as it was)
            log.info("cuDNN priming skipped: the model does not copy (%s)", e)
            return False
        if self.device.type == "cuda":
            self.peak_floor_bytes = torch.cuda.max_memory_allocated(self.device)
        inputs = x.clone() if isinstance(x, torch.Tensor) else x
        self.thread = threading.Thread(target=self._run, args=(twin, inputs, y), name="cudnn-prime", daemon=True)
        self._handler = handler
        handler.register_end_callback(self._join)
        self.thread.start()
        return True

    def _run(self, twin: nn.Module, x: Any, y: Any) -> None:
        t = time.perf_counter()
        try:
            with self.enter():
                loss = self.loss_fn(twin(x), y)
            torch.autograd.grad(loss, [p for p in twin.parameters() if p.requires_grad], allow_unused=True)
        except BaseException as e:  # noqa: BLE001 (an out-of-memory here leaves the graph to benchmark itself)
            self.error = e
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.prime_s = time.perf_counter() - t

    def _join(self, *_args: Any, restart_peak: bool = True) -> None:
        """Dynamo's end-of-compile callback: the compiled graph runs after this returns."""
        if self.thread is None or self.joined or threading.current_thread() is self.thread:
            return  # (the callbacks are Dynamo's, for every thread: the copy's own compile ends here too)
        t = time.perf_counter()
        self.joined = self._wait()
        self.waited_s = time.perf_counter() - t
        if not self.joined:
            log.info("cuDNN priming: the model's copy compiles a function of its own; the graph does not wait")
            return
        if self.device.type == "cuda" and restart_peak:
            torch.cuda.synchronize(self.device)  # the priming's kernels ended, its memory back in the allocator
            torch.cuda.empty_cache()  # and given back: the reserved peak is the step's own too
            torch.cuda.reset_peak_memory_stats(self.device)
        if self.error is not None:
            log.info("cuDNN priming failed; the compiled graph benchmarks its own convolutions: %s", self.error)

    def _wait(self) -> bool:
        """Waits for the thread; False as soon as the thread is inside a compile of its own (a compiled function
        within the model): Dynamo holds its compile lock while its callbacks run, so that wait would never end."""
        assert self.thread is not None
        while True:
            self.thread.join(0.25)
            if not self.thread.is_alive():
                return True
            frame = sys._current_frames().get(self.thread.ident or -1)
            while frame is not None:
                if frame.f_code.co_filename.endswith(COMPILING):
                    return False
                frame = frame.f_back

    def finish(self) -> None:
        """After the first step: the thread joined and the callback removed, whatever happened."""
        if self.thread is None:
            return
        self._join(restart_peak=False)  # no compile ended (the step raised): its peak is the step's own
        self.thread.join()  # a copy that compiled a function of its own ends once the step's compile has
        remove = getattr(self._handler, "remove_end_callback", None)
        if remove is not None:
            try:
                remove(self._join)
            except ValueError:
                pass
        global _LAST
        error = None if self.error is None else repr(self.error)  # not the exception: its frames hold the copy
        _LAST = {"prime_s": self.prime_s, "waited_s": self.waited_s, "error": error,
                 "peak_floor_bytes": self.peak_floor_bytes}  # fmt: skip


_LAST: dict[str, Any] | None = None  # this process's last priming (a trial's process trains one model)


def forget() -> None:
    """Before a measurement's first step: an earlier measurement's priming in this process is not its own."""
    global _LAST
    _LAST = None


def last() -> dict[str, Any] | None:
    """This process's last priming ({"prime_s", "waited_s", "error", "peak_floor_bytes"}), None where none ran: what
    the trial records, however the workload hands its TrainStep over (the README's own model wraps it in a
    lambda, so the step the trial times is not the TrainStep: ConvNeXt on an H100, 2026-12-06, primed and recorded
    nothing, and the cost model priced its eager twin's first step from the primed graph's 2.8 s rest: 11.9 s
    predicted, 26.3 s spent)."""
    return _LAST
