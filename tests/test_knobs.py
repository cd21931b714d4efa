"""Each single-device knob changes what runs: built through the workloads' own ``build(cfg, device)`` on the CPU.

Effects are observed where they happen (tensor strides and dtypes, the aten ops dispatched, hooks on modules and
optimizers, Dynamo's counters), never by reading the knob back. Backend flags that change nothing on a CPU (TF32,
cuDNN) are checked here as the flags PyTorch reads, against a fresh interpreter's, and by their numeric effect on
a GPU (the ``cuda_only`` tests, run on the H200 by ``bench/gpu_checks.py --stages gpu_tests``). Sizes are tiny; the
data-loading knobs are in test_data.py.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode

from workloads import common, matmul, resnet50, transformer_block

CPU = torch.device("cpu")
cuda_only = pytest.mark.gpu  # skipped without a CUDA GPU (conftest.py)


@pytest.fixture(autouse=True)
def restore_backend_flags() -> Iterator[None]:
    """Knobs set process-wide flags; put them back (and use one thread: the CI machine's 2 cores are shared)."""
    mm, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (mm.allow_tf32, mm.allow_fp16_reduced_precision_reduction, mm.allow_bf16_reduced_precision_reduction,
             cudnn.allow_tf32, cudnn.benchmark, torch.get_num_threads())
    torch.set_num_threads(1)
    yield
    (mm.allow_tf32, mm.allow_fp16_reduced_precision_reduction, mm.allow_bf16_reduced_precision_reduction,
     cudnn.allow_tf32, cudnn.benchmark) = saved[:5]
    torch.set_num_threads(saved[5])


class OpLog(TorchDispatchMode):
    """Counts the aten ops that run, and keeps the arguments of matrix products."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.mm_args: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.ops[str(func.overloadpacket.__name__)] += 1
        if func.overloadpacket is torch.ops.aten.mm:
            self.mm_args.append((args[0], args[1]))
        return func(*args, **(kwargs or {}))


def resnet_cfg(tmp_path: Path, **knobs: Any) -> dict[str, Any]:
    return {"workload": {"name": "resnet50", "data": "synthetic", "image_size": 32, "num_classes": 10},
            "knobs": {"precision": "fp32", "memory_format": "contiguous", "compile": "off", "cudnn_benchmark": False,
                      "batch_size": 2, "grad_accum_steps": 1, "optimizer_impl": "foreach",
                      "activation_checkpointing": "off", **knobs},
            "device": "cpu", "results_dir": str(tmp_path)}


def block_cfg(tmp_path: Path, **knobs: Any) -> dict[str, Any]:
    return {"workload": {"name": "transformer_block", "d_model": 16, "n_heads": 2, "n_layers": 2, "seq_len": 8},
            "knobs": {"precision": "fp32", "compile": "off", "batch_size": 2, "grad_accum_steps": 1,
                      "optimizer_impl": "foreach", "activation_checkpointing": "off", "sdpa_backend": "auto",
                      **knobs},
            "device": "cpu", "results_dir": str(tmp_path)}


def matmul_cfg(tmp_path: Path, **knobs: Any) -> dict[str, Any]:
    return {"workload": {"name": "matmul", "m": 24, "n": 16, "k": 8, "buffers": 2},
            "knobs": {"dtype": "fp32", "allow_tf32": False, "fp16_reduced_precision": True,
                      "bf16_reduced_precision": True, "transpose_a": False, "transpose_b": False, **knobs},
            "device": "cpu", "results_dir": str(tmp_path)}


def tiny_train(**knobs: Any) -> tuple[common.TrainStep, nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = (torch.randn(4, 8), torch.randn(4, 4))
    return common.TrainStep(model, nn.functional.mse_loss, opt, knobs, CPU), model, batch


# ---------------------------------------------------------------- memory format


def test_channels_last_changes_weight_and_input_strides(tmp_path: Path) -> None:
    for fmt, other in (("channels_last", torch.contiguous_format), ("contiguous", torch.channels_last)):
        work = resnet50.build(resnet_cfg(tmp_path, memory_format=fmt), CPU)
        want = common.memory_format(fmt)
        conv1 = work.step.model.conv1.weight  # (64, 3, 7, 7): the two layouts have different strides
        x, _ = work.next_batch()[0]
        for t in (conv1, x, work.step.model.layer1[0].conv2.weight):
            assert t.is_contiguous(memory_format=want) and not t.is_contiguous(memory_format=other), (fmt, t.stride())
        assert (x.stride(1) == 1) == (fmt == "channels_last"), "channels_last puts the channels innermost"


# ---------------------------------------------------------------- precision


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_fp16_scales_the_loss_and_the_others_do_not(precision: str) -> None:
    grads: list[torch.Tensor] = []
    train, model, batch = tiny_train(precision=precision)
    model[0].weight.register_hook(lambda g: grads.append(g.detach().clone()))  # the raw gradient, before unscaling
    reference, ref_model, _ = tiny_train(precision="fp32")
    ref_model[0].weight.register_hook(lambda g: grads.append(g.detach().clone()))
    train(batch)
    reference(batch)
    scaled, plain = grads
    assert train.scaler.is_enabled() == (precision == "fp16")
    assert common.grad_scaler(precision, CPU).is_enabled() == (precision == "fp16")
    ratio = (scaled.norm() / plain.norm()).item()
    expected = 65536.0 if precision == "fp16" else 1.0  # GradScaler's initial scale multiplies the loss
    assert ratio == pytest.approx(expected, rel=0.05), ratio


@pytest.mark.parametrize("precision, dtype", [("bf16", torch.bfloat16), ("fp32", torch.float32),
                                              ("tf32", torch.float32)])
def test_autocast_sets_the_matmul_output_dtype(precision: str, dtype: torch.dtype) -> None:
    train, model, batch = tiny_train(precision=precision)
    seen: list[torch.dtype] = []
    model[0].register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    train(batch)
    assert seen == [dtype]
    assert model[0].weight.dtype == torch.float32, "weights stay float32 under autocast"


def _backend_flags() -> tuple[bool, str, bool]:
    return torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark


def test_fp32_baseline_is_pytorchs_own_defaults(tmp_path: Path) -> None:
    """The workloads' defaults (fp32, cudnn_benchmark off) leave the flags as an untouched script has them."""
    probe = ("import torch; print(torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision(), "
             "torch.backends.cudnn.benchmark)")
    fresh = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    untouched = (fresh[0] == "True", fresh[1], fresh[2] == "True")
    assert untouched == (True, "highest", False), "PyTorch ships cuDNN TF32 on, fp32 matmuls at highest precision"
    torch.backends.cudnn.allow_tf32 = False  # whatever an earlier trial left: the knobs set every flag
    torch.set_float32_matmul_precision("high")
    resnet50.build(resnet_cfg(tmp_path, precision="fp32"), CPU)
    assert _backend_flags() == untouched
    for precision in ("bf16", "fp16"):  # their fp32 parts run as an untouched script's
        common.set_global_flags({"precision": precision})
        assert _backend_flags() == untouched


@pytest.mark.parametrize("precision, flags", [("tf32", (True, "high", True)),
                                              ("fp32-strict", (False, "highest", True))])
def test_tf32_and_strict_fp32_and_cudnn_benchmark_set_backend_flags(tmp_path: Path, precision: str,
                                                                    flags: tuple) -> None:
    resnet50.build(resnet_cfg(tmp_path, precision=precision, cudnn_benchmark=True), CPU)
    assert _backend_flags() == flags


def _relative_error(fn: Any, *inputs: torch.Tensor) -> float:
    """Error of ``fn`` in float32 on the GPU against float64."""
    exact = fn(*(t.double() for t in inputs))
    return ((fn(*inputs).double() - exact).norm() / exact.norm()).item()


@cuda_only
@pytest.mark.parametrize("precision, conv_tf32, matmul_tf32", [("fp32", True, False), ("tf32", True, True),
                                                               ("fp32-strict", False, False)])
def test_precision_decides_where_tf32_rounds_on_the_gpu(precision: str, conv_tf32: bool, matmul_tf32: bool) -> None:
    """TF32 keeps 10 mantissa bits (relative error ~1e-3 on these sizes); full fp32 ~1e-6. The fp32 baseline
    rounds convolutions like an untouched script (cuDNN TF32 on) and matmuls not at all."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("TF32 needs compute capability 8.0")
    common.set_global_flags({"precision": precision})
    g = torch.Generator(device="cuda").manual_seed(0)
    a, b = (torch.randn(1024, 1024, device="cuda", generator=g) for _ in range(2))
    x, w = torch.randn(8, 64, 32, 32, device="cuda", generator=g), torch.randn(64, 64, 3, 3, device="cuda", generator=g)
    conv = _relative_error(lambda i, k: torch.nn.functional.conv2d(i, k, padding=1), x, w)
    mm = _relative_error(torch.matmul, a, b)
    assert (conv > 1e-4) == conv_tf32, conv
    assert (mm > 1e-4) == matmul_tf32, mm


# ---------------------------------------------------------------- activation checkpointing


def _saved_activation_bytes(model: nn.Module, forward: Any) -> int:
    """Bytes autograd saves for backward during ``forward()``, parameters excluded."""
    params = {p.data_ptr() for p in model.parameters()}
    total = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in params:
            total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return total[0]


def _count_runs(model: torch.nn.Module, ac: str) -> tuple[dict[str, int], dict[str, int]]:
    """Forward calls of each checkpointed stage's wrapper, and runs of the stage inside it (a run during backward is
    the recompute), counted by hooks: the workload's hot path carries no counters."""
    calls = {s: 0 for s in resnet50.STAGES}
    runs = {s: 0 for s in resnet50.STAGES}
    if ac != "all":
        return calls, runs
    for s in resnet50.STAGES:
        wrapper = getattr(model, s)
        wrapper.register_forward_pre_hook(lambda *a, s=s: calls.__setitem__(s, calls[s] + 1))
        wrapper._checkpoint_wrapped_module.register_forward_pre_hook(lambda *a, s=s: runs.__setitem__(s, runs[s] + 1))
    return calls, runs


def test_activation_checkpointing_recomputes_and_saves_less(tmp_path: Path) -> None:
    runs, saved = {}, {}
    for ac in ("off", "all"):
        work = resnet50.build(resnet_cfg(tmp_path, activation_checkpointing=ac), CPU)
        model, train = work.step.model, work.step
        stage = model.layer3._checkpoint_wrapped_module if ac == "all" else model.layer3
        calls = []
        stage.register_forward_pre_hook(lambda *a: calls.append(1))
        wrapper_calls, inner_runs = _count_runs(model, ac)
        x, y = work.next_batch()[0]
        saved[ac] = _saved_activation_bytes(model, lambda: train.forward_loss(x, y))
        loss = train.forward_loss(x, y)
        calls.clear()
        loss.backward()
        runs[ac] = len(calls)
        if ac == "all":
            assert all(isinstance(getattr(model, s), common.Checkpointed) for s in resnet50.STAGES)
            assert [inner_runs[s] - wrapper_calls[s] for s in resnet50.STAGES] == [1, 1, 1, 1], \
                "each stage ran again once, during the one backward"
    assert runs == {"off": 0, "all": 1}, "the checkpointed stage's forward runs again during backward"
    assert saved["all"] < 0.25 * saved["off"], saved


def test_activation_checkpointing_n_wraps_the_first_n_stages(tmp_path: Path) -> None:
    model = resnet50.build(resnet_cfg(tmp_path, activation_checkpointing="2"), CPU).step.model
    assert [isinstance(getattr(model, s), common.Checkpointed) for s in resnet50.STAGES] == [True, True, False, False]


def test_checkpointed_blocks_keep_their_attributes_keywords_and_state_dict_keys() -> None:
    """A parent that inspects its blocks: ``nn.TransformerEncoder`` reads ``layers[0].self_attn`` and calls each
    layer with ``src_mask=``. Checkpointed, its layers still answer both, the model trains, and its state_dict
    keys are those of the plain model (a checkpoint saved either way loads into the other)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    plain = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    wrapped = copy.deepcopy(plain)
    assert common.checkpoint_blocks(wrapped.layers, ["0", "1"]) == 2
    assert wrapped.layers[0].self_attn is wrapped.layers[0]._checkpoint_wrapped_module.self_attn
    x = torch.randn(3, 5, 16)
    mask = torch.zeros(5, 5)
    out = wrapped(x, mask=mask)
    out.sum().backward()
    assert torch.allclose(out, plain(x, mask=mask), atol=1e-6)
    assert list(wrapped.state_dict()) == list(plain.state_dict())
    wrapped.load_state_dict(plain.state_dict())


# ---------------------------------------------------------------- compile


def test_compile_default_runs_the_forward_through_dynamo() -> None:
    """The compiled step runs a Dynamo-captured graph (counted by Dynamo), computes what eager computes, and is not
    recompiled on the next step; ``off`` captures nothing."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    plain, _, batch = tiny_train(compile="off")
    plain(batch)
    assert counters["stats"]["unique_graphs"] == 0
    compiled, model, _ = tiny_train(compile="default")
    reference, ref_model, _ = tiny_train(compile="off")
    for _ in range(2):
        assert torch.allclose(compiled(batch), reference(batch), rtol=1e-4, atol=1e-5)
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    assert counters["frames"]["ok"] >= 1 and not counters["graph_break"]
    from sweeper.trial.local import _compile_cache

    cache = _compile_cache()  # what a compiled trial records: its graphs found in Inductor's cache, or compiled
    assert cache["compile_cache_hits"] + cache["compile_cache_misses"] >= 2, cache  # the forward and the backward
    assert torch.allclose(model[0].weight, ref_model[0].weight, rtol=1e-4, atol=1e-5), "the same two updates"
    with pytest.raises(ValueError, match="compile must be one of"):
        common.maybe_compile(lambda x: x, "fast")


@cuda_only
def test_compile_reduce_overhead_replays_cuda_graphs_and_default_does_not() -> None:
    from torch._inductor import cudagraph_trees

    def graphs() -> int:
        manager = cudagraph_trees.get_manager(torch.cuda.current_device(), create_if_none_exists=False)
        return 0 if manager is None or manager.roots is None else sum(len(v) for v in manager.roots.values())

    x = torch.randn(64, 64, device="cuda")
    counts = {}
    for mode in ("default", "reduce-overhead"):
        torch._dynamo.reset()
        before = graphs()
        fn = common.maybe_compile(lambda t: torch.relu(t @ t) + 1, mode)
        for _ in range(3):  # cudagraph trees record on the second call and replay from the third
            fn(x)
        torch.cuda.synchronize()
        counts[mode] = graphs() - before
    assert counts == {"default": 0, "reduce-overhead": 1}, counts


# ---------------------------------------------------------------- optimizer, accumulation, attention


@pytest.mark.parametrize("impl, kernel, absent", [("fused", "_fused_adamw_", "_foreach_mul_"),
                                                  ("foreach", "_foreach_mul_", "_fused_adamw_"),
                                                  ("for_loop", "addcdiv_", "_foreach_mul_")])
def test_optimizer_impl_picks_the_update_kernel(tmp_path: Path, impl: str, kernel: str, absent: str) -> None:
    work = transformer_block.build(block_cfg(tmp_path, optimizer_impl=impl), CPU)
    with OpLog() as log:
        work.step(work.next_batch())
    assert log.ops[kernel] > 0 and log.ops[absent] == 0, sorted(k for k in log.ops if "foreach" in k or "fused" in k)
    if impl == "for_loop":
        assert log.ops["_fused_adamw_"] == 0


@pytest.mark.parametrize("impl, defaults", [("fused", {"fused": True}), ("foreach", {"foreach": True}),
                                            ("for_loop", {"foreach": False})])
def test_optimizer_impl_reaches_the_optimizer_defaults(tmp_path: Path, impl: str, defaults: dict[str, bool]) -> None:
    opt = resnet50.build(resnet_cfg(tmp_path, optimizer_impl=impl), CPU).step.optimizer
    assert {k: opt.defaults[k] for k in defaults} == defaults


def test_grad_accum_steps_runs_n_micro_batches_per_optimizer_step(tmp_path: Path) -> None:
    for accum in (1, 3):
        work = transformer_block.build(block_cfg(tmp_path, grad_accum_steps=accum), CPU)
        steps: list[int] = []
        handle = register_optimizer_step_post_hook(lambda *a: steps.append(1))
        try:
            with OpLog() as log:
                work.step(work.next_batch())
        finally:
            handle.remove()
        attention = log.ops["_scaled_dot_product_flash_attention_for_cpu"]
        assert attention == 2 * accum, "one attention per layer per micro-batch"
        assert steps == [1], "one optimizer step per measured step"
        assert work.samples_per_step == 2 * accum


def test_sdpa_backend_math_replaces_the_fused_attention_kernel(tmp_path: Path) -> None:
    ops = {}
    for backend in ("auto", "math"):
        work = transformer_block.build(block_cfg(tmp_path, sdpa_backend=backend), CPU)
        with OpLog() as log:
            work.step(work.next_batch())
        ops[backend] = log.ops
    fused = "_scaled_dot_product_flash_attention_for_cpu"
    assert ops["auto"][fused] == 2 and ops["math"][fused] == 0
    assert ops["math"]["bmm"] > ops["auto"]["bmm"], "the math backend runs attention as plain batched matmuls"
    with transformer_block.sdpa_context("math"):
        assert torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()
        assert not torch.backends.cuda.mem_efficient_sdp_enabled()
    assert torch.backends.cuda.flash_sdp_enabled(), "the context restores the backends"


# ---------------------------------------------------------------- between backward and the optimizer


def own_clipping_model(knobs: dict[str, Any], max_norm: float, seen: list[dict[str, float]]) -> common.TrainStep:
    """A model of a user's own that clips its gradients through ``TrainStep``'s hook, its optimizer built with the
    ``optimizer_impl`` knob: what ``build(cfg, device)`` of a real training script does."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(32, 16), nn.Flatten(), nn.Linear(16 * 6, 32))
    opt = torch.optim.SGD(model.parameters(), lr=1.0, **common.optimizer_kwargs(knobs["optimizer_impl"], CPU))

    def clip(train: common.TrainStep) -> None:
        total = train.clip_grad_norm_(max_norm)
        after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in train.parameters()]))
        seen.append({"before": float(total), "after": float(after), "scale": float(train.scaler.get_scale())})

    return common.TrainStep(model, nn.functional.cross_entropy, opt, knobs, CPU, before_step=clip)


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_own_model_clips_unscaled_gradients_with_the_knobs_applied(precision: str) -> None:
    """The hook sees true gradients (fp16's loss scale divided out first), its clipping is what the optimizer steps
    on, and the knobs still hold: autocast in the forward, the step compiled, the optimizer's implementation, two
    micro-batches per optimizer step."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    knobs = {"precision": precision, "compile": "default", "optimizer_impl": "foreach", "grad_accum_steps": 2}
    batch = [(torch.randint(0, 32, (4, 6)), torch.randint(0, 32, (4,))) for _ in range(2)]
    reference: list[dict[str, float]] = []
    own_clipping_model({**knobs, "precision": "fp32", "compile": "off"}, 1e9, reference)(batch)  # no clipping
    seen: list[dict[str, float]] = []
    train = own_clipping_model(knobs, 1e-3, seen)
    dtypes: list[torch.dtype] = []
    train.model[2].register_forward_hook(lambda m, i, out: dtypes.append(out.dtype))
    steps: list[int] = []
    handle = register_optimizer_step_post_hook(lambda *a: steps.append(1))
    before = [p.detach().clone() for p in train.parameters()]
    try:
        train(batch)
    finally:
        handle.remove()
    assert len(seen) == 1 and steps == [1], "the hook once per optimizer step, after both micro-batches"
    assert seen[0]["scale"] == (65536.0 if precision == "fp16" else 1.0)
    assert seen[0]["before"] == pytest.approx(reference[0]["before"], rel=0.05), "an unscaled gradient norm"
    assert seen[0]["after"] == pytest.approx(1e-3, rel=1e-3), "clipped to max_norm"
    moved = torch.linalg.vector_norm(torch.stack([(p.detach() - b).norm() for p, b in zip(train.parameters(), before)]))
    assert float(moved) == pytest.approx(1e-3, rel=1e-2), "SGD (lr 1) stepped on the clipped gradients"
    low = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision, torch.float32)
    assert dtypes and set(dtypes) <= {low} and counters["stats"]["unique_graphs"] >= 1, (
        dtypes,
        dict(counters["stats"]),
    )
    assert train.optimizer.defaults["foreach"] is True


def test_before_optimizer_step_is_an_override_point() -> None:
    """A subclass overrides ``before_optimizer_step``; ``unscale_`` twice in one step divides once."""
    calls: list[float] = []

    class Clipped(common.TrainStep):
        def before_optimizer_step(self) -> None:
            self.unscale_()
            self.unscale_()
            calls.append(float(self.model[0].weight.grad.norm()))

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train = Clipped(model, nn.functional.mse_loss, opt, {"precision": "fp16"}, CPU)
    batch = (torch.randn(4, 8), torch.randn(4, 4))
    train(batch)
    train(batch)
    assert len(calls) == 2 and calls[0] < 100, "unscaled: not 65536 times a gradient of order 1"


# ---------------------------------------------------------------- matmul


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposed_operands_are_column_major_views(tmp_path: Path, ta: bool, tb: bool) -> None:
    work = matmul.build(matmul_cfg(tmp_path, transpose_a=ta, transpose_b=tb), CPU)
    with OpLog() as log:
        work.step(work.next_batch())
    (a, b), = log.mm_args
    assert a.shape == (24, 8) and b.shape == (8, 16)
    assert a.is_contiguous() != ta and b.is_contiguous() != tb
    assert (a.stride(0) == 1) == ta and (b.stride(0) == 1) == tb, "a transposed operand is read column-major"


@pytest.mark.parametrize("dtype, torch_dtype", [("fp32", torch.float32), ("tf32", torch.float32),
                                                ("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_matmul_dtype_and_tf32_flags(tmp_path: Path, dtype: str, torch_dtype: torch.dtype) -> None:
    work = matmul.build(matmul_cfg(tmp_path, dtype=dtype), CPU)
    with OpLog() as log:
        work.step(work.next_batch())
    (a, b), = log.mm_args
    assert a.dtype == b.dtype == torch_dtype
    assert torch.get_float32_matmul_precision() == ("high" if dtype == "tf32" else "highest")
    assert work.precision == dtype


def test_matmul_allow_tf32_and_reduced_precision_flags(tmp_path: Path) -> None:
    matmul.build(matmul_cfg(tmp_path, allow_tf32=True, fp16_reduced_precision=False, bf16_reduced_precision=False), CPU)
    mm = torch.backends.cuda.matmul
    assert mm.allow_tf32 and not mm.allow_fp16_reduced_precision_reduction
    assert not mm.allow_bf16_reduced_precision_reduction
    matmul.build(matmul_cfg(tmp_path, fp16_reduced_precision=True, bf16_reduced_precision=True), CPU)
    assert not mm.allow_tf32 and mm.allow_fp16_reduced_precision_reduction and mm.allow_bf16_reduced_precision_reduction


# ---------------------------------------------------------------- registry


def test_a_workload_is_a_module_that_defines_build() -> None:
    """No list of names anywhere: a module of ``workloads/`` is a workload when it defines ``build``."""
    import workloads

    assert workloads.available() == ["matmul", "resnet50", "transformer_block"]
    with pytest.raises(KeyError, match="known workloads: matmul, resnet50, transformer_block"):
        workloads.load("common")


def test_cuda_connections_is_checked_before_launch_and_sets_the_environment() -> None:
    from workloads.base import DeviceInfo

    gpu = DeviceInfo("cuda", "H200", 1, (9, 0))
    for good in (None, 1, 8, 32):
        assert common.check_common({"cuda_connections": good}, gpu) is None
    for bad in (0, 33, "32", 8.0, True):
        reason = common.check_common({"cuda_connections": bad}, gpu)
        expected = f"knobs.cuda_connections must be an integer in 1..32 (CUDA_DEVICE_MAX_CONNECTIONS), got {bad!r}"
        assert reason == expected
    assert common.knob_env({"cuda_connections": 32}) == {"CUDA_DEVICE_MAX_CONNECTIONS": "32"}
    assert common.knob_env({"cuda_connections": None}) == {} == common.knob_env({})
    from sweeper.report.recipe import snippet

    assert snippet(common.RECIPE["cuda_connections"], None, "cuda") == []
    assert snippet(common.RECIPE["cuda_connections"], 32, "cpu") == [], "nothing reads it on a CPU"
    assert "CUDA_DEVICE_MAX_CONNECTIONS'] = '{value}'" in snippet(common.RECIPE["cuda_connections"], 32, "cuda")[0]



@cuda_only
def test_in_process_trials_refuse_a_cuda_connections_cuda_did_not_start_with() -> None:
    """trial.isolate=false: CUDA reads CUDA_DEVICE_MAX_CONNECTIONS and CUDA_VISIBLE_DEVICES once; a later trial
    wanting another value (set, or unset where CUDA started with one) is refused instead of running, and being
    recorded, with the wrong one."""
    from sweeper.trial import child

    torch.zeros(1, device="cuda")  # CUDA runs in this process, started without the variable
    assert os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") is None
    with child.placed({"knobs": {}}):
        pass
    with pytest.raises(RuntimeError, match="CUDA_DEVICE_MAX_CONNECTIONS=32, .* already runs in this process with None"):
        with child.placed({"knobs": {"cuda_connections": 32}}):
            pass
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    with pytest.raises(RuntimeError, match=f"CUDA_VISIBLE_DEVICES=7, .* already runs in this process with {visible}"):
        with child.placed({"env": {"CUDA_VISIBLE_DEVICES": "7"}}):
            pass


def test_one_micro_batch_adds_no_operation_a_plain_training_loop_lacks() -> None:
    """The harness's own cost is counted in the measured speed: with one micro-batch the loss is not divided by the
    micro-batch count (an operation and its backward each step, ~18 us of a 0.3 ms CPU step), with two it is."""
    for accum in (1, 2):
        train, _model, micro = tiny_train(precision="fp32", compile="off", grad_accum_steps=accum)
        log = OpLog()
        with log:
            train([micro] * accum)
        assert ("div" in log.ops) is (accum > 1), (accum, dict(log.ops))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_without_fp16_a_step_makes_no_call_a_plain_training_loop_lacks(precision: str) -> None:
    """Without fp16 the loss scaler is off: the step calls none of its pass-throughs (scale, step, update: ~5 us of a
    0.3 ms CPU step), and in fp32 it enters no autocast context; a fixed cost per step that a plain loop lacks
    inflates a speed-up measured against a small default step (the recipe's stated speed-up of a CPU MLP at batch
    8 -> 128 read ~2 % above one's own loop's)."""
    train, _model, micro = tiny_train(precision=precision, compile="off", grad_accum_steps=1)
    calls: list[str] = []
    for name in ("scale", "step", "update"):
        setattr(train.scaler, name, lambda *a, _n=name, **k: calls.append(_n))
    entered: list[str] = []
    real = common.autocast
    common.autocast = lambda *a, **k: (entered.append("autocast"), real(*a, **k))[1]
    try:
        train(micro)
    finally:
        common.autocast = real
    assert calls == [], calls
    assert entered == ([] if precision == "fp32" else ["autocast"]), entered
