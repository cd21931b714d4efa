"""Knob application shared by every workload: precision, memory format, compile, checkpointing, optimizer.

Each knob lives here once; a workload calls these helpers instead of interpreting knobs itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    CheckpointWrapper,
    checkpoint_wrapper,
)

from workloads import prime
from workloads.spec.training import (  # noqa: F401 (re-exported: a workload's knob helpers in one place)
    COMPILE_MODES,
    ENV_KNOBS,
    MEMORY_FORMATS,
    OPTIMIZER_IMPLS,
    PRECISIONS,
    TrainingKnobs,
    check_common,
    knob_env,
)
from workloads.spec.typed import of


def set_global_flags(knobs: dict[str, Any]) -> None:
    """Process-wide backend flags, PyTorch's own defaults unless a knob asks otherwise.

    ``fp32`` (and fp16/bf16, whose fp32 parts run the same way) is what an untouched script gets: cuDNN may use TF32
    for convolutions (``torch.backends.cudnn.allow_tf32`` True, as PyTorch ships it) and matmuls run at "highest"
    float32 precision (no TF32). ``tf32`` adds TF32 matmuls (``set_float32_matmul_precision("high")``);
    ``fp32-strict`` turns TF32 off for convolutions too. ``cudnn_benchmark`` is cuDNN's autotuning (off by default).
    """
    k = of(TrainingKnobs, knobs)
    torch.set_float32_matmul_precision("high" if k.precision == "tf32" else "highest")
    torch.backends.cudnn.allow_tf32 = k.precision != "fp32-strict"
    torch.backends.cudnn.benchmark = bool(k.cudnn_benchmark)


def autocast(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    """Autocast for fp16/bf16 (weights stay fp32, matmuls and convs run in the low precision); a no-op otherwise."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if precision in ("fp16", "bf16"):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        return torch.autocast(device_type=device.type, dtype=dtype)
    return contextlib.nullcontext()


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler:
    """fp16 needs loss scaling; for the others the scaler is disabled (a pass-through)."""
    return torch.amp.GradScaler(device.type, enabled=precision == "fp16")


def memory_format(name: str) -> torch.memory_format:
    if name not in MEMORY_FORMATS:
        raise ValueError(f"memory_format must be one of {MEMORY_FORMATS}, got {name!r}")
    return torch.channels_last if name == "channels_last" else torch.contiguous_format


def maybe_compile(fn: Callable, mode: str) -> Callable:
    """``torch.compile`` with the knob's mode; ``off`` returns ``fn`` unchanged."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile must be one of {COMPILE_MODES}, got {mode!r}")
    if mode == "off":
        return fn
    return torch.compile(fn, mode=None if mode == "default" else mode)


# torch.distributed's activation-checkpoint wrapper (torchtitan's): the wrapped module's forward under
# ``torch.utils.checkpoint`` (non-reentrant), its keyword arguments passed through, its attributes read through the
# wrapper and its state_dict keys unchanged. A block a parent inspects needs all three: ``nn.TransformerEncoder``
# reads ``layers[0].self_attn`` and calls each layer with ``src_mask=``.
Checkpointed = CheckpointWrapper


def checkpoint_blocks(parent: nn.Module, names: Iterable[str]) -> int:
    """Wrap the named children of ``parent`` in :data:`Checkpointed` (activations recomputed in backward, not
    stored); returns how many were wrapped."""
    n = 0
    for name in names:
        setattr(parent, name, checkpoint_wrapper(getattr(parent, name), checkpoint_impl=CheckpointImpl.NO_REENTRANT))
        n += 1
    return n


def optimizer_kwargs(impl: str, device: torch.device) -> dict[str, Any]:
    """``foreach`` (multi-tensor) or ``fused`` (one kernel) optimizer implementation; ``for_loop`` the plain one."""
    if impl == "fused":
        return {"fused": True}
    if impl == "foreach":
        return {"foreach": True}
    if impl == "for_loop":
        return {"foreach": False}
    raise ValueError(f"optimizer_impl must be one of {OPTIMIZER_IMPLS}, got {impl!r}")


class TrainStep:
    """One optimizer step over ``grad_accum_steps`` micro-batches, with autocast and (for fp16) loss scaling.

    ``step(batch)`` takes a list of micro-batches (``(inputs, targets)`` each) or one, and returns the last loss
    (a tensor; nothing is synchronized). The forward+loss function may be compiled.

    Between the last micro-batch's backward and the optimizer step, ``before_step(train)`` runs: the place for
    gradient clipping or anything else a training script does there (a subclass may override
    :meth:`before_optimizer_step` instead). The knobs stay applied: precision and compile around the forward,
    the loss scale, accumulation and the optimizer's implementation around the hook. Under fp16 the gradients
    there are still multiplied by the loss scale: call ``train.unscale_()`` before reading them, or
    ``train.clip_grad_norm_(max_norm)``, which unscales first (``GradScaler.unscale_``, once per step)::

        train = common.TrainStep(model, loss_fn, opt, knobs, device, before_step=lambda t: t.clip_grad_norm_(1.0))
    """

    def __init__(
        self,
        model: nn.Module,
        loss_fn: Callable,
        optimizer: torch.optim.Optimizer,
        knobs: dict[str, Any],
        device: torch.device,
        before_step: Callable[[TrainStep], Any] | None = None,
        prime_cudnn: bool = prime.BY_DEFAULT,
    ) -> None:
        k = of(TrainingKnobs, knobs)
        self.model, self.optimizer, self.device = model, optimizer, device
        self.before_step = before_step
        self.precision = k.precision
        self.scaler = grad_scaler(self.precision, device)
        self._unscaled = False
        self.accum = int(k.grad_accum_steps)
        if self.accum < 1:
            raise ValueError(f"grad_accum_steps must be >= 1, got {self.accum}")

        def forward_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            with autocast(self.precision, device):
                return loss_fn(model(x), y)

        def plain_forward_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
            return loss_fn(model(x), y)

        # fp32/tf32: no context entered each step (autocast checks the precision here, once)
        plain = isinstance(autocast(self.precision, device), contextlib.nullcontext)
        self.forward_loss = maybe_compile(plain_forward_loss if plain else forward_loss, k.compile)
        # cuDNN's benchmark filled by an eager copy while the first step compiles (workloads.prime)
        self._primer = (
            prime.Primer(model, loss_fn, lambda: autocast(self.precision, device), device)
            if prime_cudnn and prime.wanted(model, k.compile, device)
            else None
        )
        self.peak_floor_bytes = 0  # the device's peak before a priming (its own peak is left out)
        self.primed: dict[str, Any] | None = None  # the priming's seconds, once it ran

    def parameters(self) -> list[torch.Tensor]:
        """The parameters the optimizer updates (those of its param groups)."""
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def unscale_(self) -> None:
        """Divide the gradients by the fp16 loss scale (a no-op for the other precisions, or when done this step)."""
        if self.scaler.is_enabled() and not self._unscaled:
            self.scaler.unscale_(self.optimizer)
        self._unscaled = True

    def clip_grad_norm_(self, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """``torch.nn.utils.clip_grad_norm_`` over the optimizer's parameters, on unscaled gradients; returns the
        total norm before clipping (a tensor: nothing is synchronized)."""
        self.unscale_()
        return torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm, norm_type)

    def before_optimizer_step(self) -> None:
        """Runs after the last backward of a step, before ``optimizer.step``: calls ``before_step(self)``."""
        if self.before_step is not None:
            self.before_step(self)

    def __call__(self, batch: Any) -> torch.Tensor:
        micro = batch if isinstance(batch, list) else [batch]
        primer, self._primer = self._primer, None
        if primer is not None and primer.start(*micro[0]):
            try:
                return self._step(micro)
            finally:
                primer.finish()
                self.peak_floor_bytes = primer.peak_floor_bytes
                self.primed = {"prime_s": primer.prime_s, "waited_s": primer.waited_s, "error": primer.error}
        return self._step(micro)

    def _step(self, micro: list) -> torch.Tensor:
        scaling = self.scaler.is_enabled()
        loss = None
        # Little a plain training loop lacks: one micro-batch, no division (an operation and its backward each
        # step, ~18 us on a CPU); without fp16, no scaler's pass-through calls (~5 us). What is left (the list of
        # micro-batches, the scaler's check, the hook, the loss detached) costs ~1-1.5 us a step on the 2-core CPU
        # VM (2026-12-05). The harness's own cost is counted in the measured speed, and inflates a speed-up
        # measured against a small, fast default step.
        for x, y in micro:
            loss = self.forward_loss(x, y)
            out = loss / len(micro) if len(micro) > 1 else loss
            (self.scaler.scale(out) if scaling else out).backward()
        self._unscaled = False
        self.before_optimizer_step()
        if scaling:
            self.scaler.step(self.optimizer)  # skips the step if unscaled fp16 gradients hold inf or NaN
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()


# ---------------------------------------------------------------- recipe snippets
# How each knob applied above reads in a training script (``python -m sweeper.report RESULTS --recipe``): knob ->
# value -> lines. A knob's entry stays beside its application, so the two change together. A literal: the report
# reads it from this file's source without importing it (no torch there). Values are spelled as in the report
# (``true``, ``256``); ``*`` is any other value; ``<value>@cpu`` / ``<value>@cuda`` (``*@cpu``: any value) are the
# lines for a study measured on that device, looked up first. In the lines, ``{value}``, ``{device}`` (cpu,
# cuda) and ``{optimizer}`` (the model's optimizer class) are filled in.
RECIPE = {
    "precision": {
        "tf32": ["torch.set_float32_matmul_precision('high')  # TF32 matmuls"],
        "bf16": ["with torch.autocast(device_type='{device}', dtype=torch.bfloat16):  # forward and loss only",
                 "    loss = loss_fn(model(x), y)"],
        "fp16": ["scaler = torch.amp.GradScaler('{device}')",
                 "with torch.autocast(device_type='{device}', dtype=torch.float16):  # forward and loss only",
                 "    loss = loss_fn(model(x), y)",
                 "scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update()"],
        "fp32-strict": ["torch.backends.cudnn.allow_tf32 = False  # no TF32 in convolutions either"],
        "fp32-strict@cpu": [],
    },
    "cudnn_benchmark": {"true": ["torch.backends.cudnn.benchmark = True"], "true@cpu": []},
    "cuda_connections": {"*": ["os.environ['CUDA_DEVICE_MAX_CONNECTIONS'] = '{value}'  # before CUDA starts: "
                               "side streams get hardware queues of their own"], "*@cpu": []},
    "memory_format": {"channels_last": ["model = model.to(memory_format=torch.channels_last)",
                                        "x = x.to(memory_format=torch.channels_last)  # every input batch"]},
    "compile": {"off": [], "default": ["model = torch.compile(model)"],
                "*": ["model = torch.compile(model, mode='{value}')"]},
    "optimizer_impl": {"fused": ["optimizer = {optimizer}(model.parameters(), ..., fused=True)"],
                       "foreach": ["optimizer = {optimizer}(model.parameters(), ..., foreach=True)"],
                       "for_loop": ["optimizer = {optimizer}(model.parameters(), ..., foreach=False)"]},
    "batch_size": {"*": ["batch_size = {value}  # per optimizer step: batch_size x grad_accum_steps samples"]},
    "grad_accum_steps": {"1": [], "*": ["# accumulate {value} micro-batches per optimizer step: loss / {value}, "
                                        "backward() each, step() after the last"]},
    "activation_checkpointing": {
        "off": [],
        "all": ["x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)  # every block"],
        "*": ["x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)  # the first {value} blocks"],
    },
}
