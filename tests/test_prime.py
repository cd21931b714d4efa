"""cuDNN's benchmark primed by an eager copy while the first step compiles (workloads.prime), on the CPU: the
compiled graph's first run waits for the priming thread, and the step trains exactly as without it."""

from __future__ import annotations

import math
import threading
import time

import torch
import torch.nn.functional as F
from torch import nn

from sweeper.trial import measure
from workloads import common, prime


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(8, 4),
    )  # fmt: skip


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 4, (4,), generator=g)


def test_the_compiled_graph_runs_only_after_the_priming_thread_ended() -> None:
    model = _model()
    x, y = _batch()
    compile_started = threading.Event()
    events: list[str] = []

    def slow_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        compile_started.wait(60)  # the priming outlasts the compile's start by a second
        time.sleep(1.0)
        events.append("primed")
        return F.cross_entropy(out, target)

    torch._dynamo.reset()  # (clears the callbacks too)
    handler = torch._dynamo.callback.callback_handler
    opened = handler.register_start_callback(lambda *_: compile_started.set())
    try:
        compiled = torch.compile(lambda a, b: F.cross_entropy(model(a), b), backend="eager")
        primer = prime.Primer(model, slow_loss, _Null, x.device)
        assert primer.start(x, y)
        loss = compiled(x, y)
        events.append("graph ran")
        primer.finish()
    finally:
        handler.remove_start_callback(opened)
    assert events == ["primed", "graph ran"]
    assert primer.joined and not primer.thread.is_alive() and primer.error is None
    assert primer._join not in handler.end_callbacks
    assert torch.isfinite(loss)
    assert all(p.grad is None for p in model.parameters())  # the copy wrote no gradient on the model


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        return None


def _one_step(
    monkeypatch, primed: bool, loss_fn=F.cross_entropy, wrapped: bool = False
) -> tuple[list[torch.Tensor], int, dict]:
    """Two steps of a TrainStep (primed or not), and the row's priming columns as the trial records them; with
    ``wrapped``, of a step that wraps the TrainStep in a lambda, as the README's own model does."""
    monkeypatch.setattr(prime, "wanted", lambda *_: primed)  # the CPU has no cuDNN: the condition forced
    prime.forget()  # as a measurement starts
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    knobs = {"precision": "fp32", "compile": "off", "grad_accum_steps": 1}
    train = common.TrainStep(model, loss_fn, opt, knobs, torch.device("cpu"), prime_cudnn=True)
    started = []
    if primed:
        real = prime.Primer.start
        monkeypatch.setattr(prime.Primer, "start", lambda self, *a: started.append(1) or real(self, *a))
    train(_batch())
    train(_batch())  # the priming runs once, on the first step only
    state = [p.detach().clone() for p in model.parameters()] + [b.clone() for b in model.buffers()]
    step = (lambda batch: train(batch)) if wrapped else train
    return state, len(started), measure._primed(step)  # the row's columns of the priming


def test_a_primed_step_trains_exactly_as_an_unprimed_one(monkeypatch) -> None:
    plain, _, unprimed_row = _one_step(monkeypatch, primed=False)
    primed, starts, row = _one_step(monkeypatch, primed=True)
    assert starts == 1
    assert row["prime_s"] > 0 and row["prime_waited_s"] >= 0  # the trial's row says what the priming took
    assert math.isnan(unprimed_row["prime_s"]) and math.isnan(unprimed_row["prime_waited_s"])
    assert all(torch.equal(a, b) for a, b in zip(plain, primed, strict=True))  # BatchNorm's running stats too


def test_a_step_that_wraps_its_trainstep_records_its_priming_too(monkeypatch) -> None:
    """The README's own model hands the trial ``lambda _batch: train((x, y))``: the priming is the process's, and
    its row says so (ConvNeXt on an H100, 2026-12-06, primed and recorded nothing; its eager twin was priced from
    the primed graph's rest, 11.9 s for 26.3 s). A later measurement with no priming records none."""
    _, starts, row = _one_step(monkeypatch, primed=True, wrapped=True)
    assert starts == 1 and row["prime_s"] > 0 and row["prime_waited_s"] >= 0
    _, _, later = _one_step(monkeypatch, primed=False, wrapped=True)
    assert math.isnan(later["prime_s"])


def test_a_trainstep_that_did_not_prime_records_none_of_another_ones_priming(monkeypatch) -> None:
    """The process's last priming is a wrapped step's record only: a TrainStep that was not primed (its own
    ``primed`` None) records none, even after another TrainStep in the process primed; the record keeps the
    error's text, not the exception (whose frames hold the copy of the model)."""
    _one_step(monkeypatch, primed=True, wrapped=True)
    assert prime.last() is not None and prime.last()["prime_s"] > 0
    monkeypatch.setattr(prime, "wanted", lambda *_: False)
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    knobs = {"precision": "fp32", "compile": "off", "grad_accum_steps": 1}
    plain = common.TrainStep(model, F.cross_entropy, opt, knobs, torch.device("cpu"), prime_cudnn=True)
    plain(_batch())
    assert math.isnan(measure._primed(plain)["prime_s"])
    primer = prime.Primer(model, F.cross_entropy, _Null, torch.device("cpu"))
    primer.thread, primer.error, primer._handler = threading.Thread(target=lambda: None), MemoryError("x"), None
    primer.thread.start()
    primer.finish()
    assert prime.last()["error"] == "MemoryError('x')"


def test_a_priming_that_runs_out_of_memory_leaves_the_step_as_it_was(monkeypatch) -> None:
    """The copy's eager step can need more memory than the compiled one (a batch that fits only compiled): its
    out-of-memory stays in the thread, the step trains as unprimed, and the row says no priming ran."""

    def loss_fn(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if threading.current_thread().name == "cudnn-prime":  # the copy only
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return F.cross_entropy(out, target)

    plain, _, _ = _one_step(monkeypatch, primed=False)
    primed, starts, row = _one_step(monkeypatch, primed=True, loss_fn=loss_fn)
    assert starts == 1
    assert all(torch.equal(a, b) for a, b in zip(plain, primed, strict=True))
    assert math.isnan(row["prime_s"]) and math.isnan(row["prime_waited_s"])


def test_priming_is_wanted_only_for_a_compiled_model_with_convolutions_on_a_gpu_benchmarking() -> None:
    conv, linear = _model(), nn.Linear(4, 4)
    gpu, cpu = torch.device("cuda"), torch.device("cpu")
    size = sum(t.numel() * t.element_size() for t in (*conv.parameters(), *conv.buffers()))
    free = 4 * size  # the device's free memory, given (the CPU has no GPU to ask)
    before = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = True
        assert prime.wanted(conv, "default", gpu, free)
        assert not prime.wanted(conv, "default", gpu, free - 1)  # the copy would take over a quarter
        assert not prime.wanted(conv, "off", gpu, free)
        assert prime.wanted(conv, "reduce-overhead", gpu, free)
        assert not prime.wanted(conv, "max-autotune-no-cudagraphs", gpu, free)  # it times kernels as it compiles
        assert not prime.wanted(linear, "default", gpu, free)
        assert not prime.wanted(conv, "default", cpu, free)
        torch.backends.cudnn.benchmark = False
        assert not prime.wanted(conv, "default", gpu, free)
    finally:
        torch.backends.cudnn.benchmark = before


def test_priming_is_never_wanted_in_a_distributed_trial(tmp_path) -> None:
    conv = _model()
    free = 1 << 40
    before = torch.backends.cudnn.benchmark
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        torch.backends.cudnn.benchmark = True
        assert not prime.wanted(conv, "default", torch.device("cuda"), free)
    finally:
        torch.distributed.destroy_process_group()
        torch.backends.cudnn.benchmark = before
    torch.backends.cudnn.benchmark = True
    try:
        assert prime.wanted(conv, "default", torch.device("cuda"), free)  # the same, outside the group
    finally:
        torch.backends.cudnn.benchmark = before


def test_a_copy_that_compiles_a_function_of_its_own_does_not_hold_the_graph_forever() -> None:
    """Dynamo holds its compile lock while its end-of-compile callbacks run: a copy whose forward calls a compiled
    function of its own waits for that lock, and a graph waiting for the copy would wait for ever."""
    model = _model()
    x, y = _batch()
    compile_started = threading.Event()
    torch._dynamo.reset()
    inner = torch.compile(lambda t: t * 1.0, backend="eager")

    def compiling_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        compile_started.wait(60)
        time.sleep(0.5)  # inside the step's compile: its lock is held
        return inner(F.cross_entropy(out, target))

    handler = torch._dynamo.callback.callback_handler
    opened = handler.register_start_callback(lambda *_: compile_started.set())
    done: list[torch.Tensor] = []
    primer = prime.Primer(model, compiling_loss, _Null, x.device)

    def first_step() -> None:
        assert primer.start(x, y)
        done.append(torch.compile(lambda a, b: F.cross_entropy(model(a), b), backend="eager")(x, y))
        primer.finish()

    runner = threading.Thread(target=first_step, daemon=True)
    try:
        runner.start()
        runner.join(60)
    finally:
        handler.remove_start_callback(opened)
    assert not runner.is_alive(), "the compiled graph waited for a copy that waited for the compile lock"
    assert done and torch.isfinite(done[0])
    assert not primer.thread.is_alive() and primer.error is None  # the copy's own compile ran after the step's
