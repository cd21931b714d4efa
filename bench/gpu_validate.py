"""Validate the tool's numbers on a GPU in one call: each stage prints a line and appends it to a JSONL file.

    python bench/gpu_validate.py OUT_DIR [--smoke] [--stages matmul,transformer,resnet,oom,compile,jpeg]

Stages, in priority order (a time-limited GPU job can end mid-way; what finished is already written):
  matmul       the tool's TFLOP/s for bf16/fp16/tf32/fp32 at 8192^3 vs triton.testing.do_bench, same run
  transformer  transformer_block d_model 4096, seq 2048, bf16: MFU
  resnet       resnet50 synthetic batch 256: fp32, bf16, bf16+channels_last (cudnn.benchmark, fused SGD)
  oom          a real CLI sweep over batch sizes that do not fit in fp32: OOM trials infeasible, the rest ranked
  compile      resnet50 bf16+channels_last+torch.compile
  jpeg         resnet50 on the JPEG pipeline: naive (num_workers=0) vs tuned data knobs
  jpeg_tuned   the tuned JPEG pipeline (12/14 workers x transfer_dtype) vs the same model on synthetic data
  accuracy     the tool's step time vs do_bench (matmul shapes) and Timer.blocked_autorange (training steps)
  repeat       one configuration in 5 separate trials: coefficient of variation
  overhead     bench/overhead.py with matmul on this device
  distributed  bench/distributed_gpu.py (DDP and FSDP, one rank)
  fixture      the report fixture's GPU half (tests/fixtures/report/record.py's matmul grid)
--smoke runs every stage at tiny sizes on the CPU (checks the script, not the numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sweeper.trial import gpu  # noqa: E402
from sweeper.sweep.config.trial_config import plain, trial_config  # noqa: E402
from sweeper.trial.isolate import run_isolated  # noqa: E402


class Bench:
    def __init__(self, out: Path, smoke: bool) -> None:
        self.out, self.smoke = out, smoke
        self.results = out / "results"
        self.log = out / "gpu_validate.jsonl"
        self.info = gpu.device_info()
        self.rows: list[dict[str, Any]] = []

    def config(self, workload: str, overrides: list[str]) -> dict[str, Any]:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            cfg = compose("config", overrides=[f"+workload={workload}", f"results_dir={self.results}",
                                               "preset=" + ("tiny" if self.smoke else "none"), *overrides])
        return trial_config(plain(cfg), self.info)

    def record(self, stage: str, name: str, **values: Any) -> dict[str, Any]:
        row = {"stage": stage, "name": name, "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **values}
        self.rows.append(row)
        with self.log.open("a") as f:
            f.write(json.dumps(row, default=str) + "\n")
        shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items()
                         if k not in ("metrics",))
        print(f"[{stage}] {name}: {shown}", flush=True)
        return row

    def tool(self, stage: str, name: str, workload: str, overrides: list[str], keep: tuple[str, ...] = ()) -> dict:
        cfg = self.config(workload, overrides)
        outcome = run_isolated(cfg, 900, self.out / "logs" / f"{stage}-{name}.log")
        m = outcome.metrics
        picked = {k: m.get(k) for k in ("throughput", "throughput_unit", "step_ms_p50", "step_cv", "mfu",
                                        "achieved_tflops", "peak_mem_bytes", "gpu_util_mean", "data_wait_frac",
                                        "first_step_s", "compile_s", "gpu_name", *keep)}
        return self.record(stage, name, status=outcome.status.value, reason=outcome.reason, **picked)


def _do_bench_ms(fn: Any) -> float:
    from triton.testing import do_bench

    # Median of ~2 s of calls after ~0.25 s warm-up: as long as the tool's window, so both see the same clocks.
    return do_bench(fn, warmup=250, rep=2000, return_mode="median")


def _matmul_pair(b: Bench, stage: str, name: str, m: int, n: int, k: int, dtype_name: str) -> None:
    """do_bench, then the tool in its own trial process, then do_bench again: drift shows as before != after."""
    import torch

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
    torch.backends.cuda.matmul.allow_tf32 = dtype_name == "tf32"
    a = torch.randn(m, k, device="cuda").to(dtypes[dtype_name])
    c = torch.randn(k, n, device="cuda").to(dtypes[dtype_name])
    before = _do_bench_ms(lambda: torch.matmul(a, c))
    tool = b.tool(stage, name, "matmul", [f"knobs.dtype={dtype_name}", f"workload.m={m}", f"workload.n={n}",
                                          f"workload.k={k}", "measure.warmup_steps=10", "measure.steps=50",
                                          "measure.min_time_s=2.0"],
                  keep=("steps_measured", "measured_s", "sm_clock_mhz", "power_w", "throttle_reasons"))
    after = _do_bench_ms(lambda: torch.matmul(a, c))
    torch.backends.cuda.matmul.allow_tf32 = False
    del a, c
    torch.cuda.empty_cache()
    ref_ms = (before + after) / 2
    flops = 2.0 * m * n * k
    tool_ms = tool["step_ms_p50"] or float("nan")
    b.record(stage, f"{name}-do_bench", ref_ms=ref_ms, ref_before_ms=before, ref_after_ms=after,
             tool_ms=tool_ms, tool_over_ref_time=tool_ms / ref_ms, ref_tflops=flops / ref_ms / 1e9,
             tool_tflops=tool["throughput"], tool_over_ref=(tool["throughput"] or 0) / (flops / ref_ms / 1e9))


def stage_matmul(b: Bench) -> None:
    n = 256 if b.smoke else 8192
    for dtype in ("bf16", "fp32") if b.smoke else ("bf16", "fp16", "tf32", "fp32"):  # smoke: one reduced, one full
        if b.info.kind != "cuda":
            b.tool("matmul", dtype, "matmul", [f"knobs.dtype={dtype}", f"workload.m={n}", f"workload.n={n}",
                                                f"workload.k={n}", "measure.steps=50", "measure.warmup_steps=10"])
        else:
            _matmul_pair(b, "matmul", dtype, n, n, n, dtype)


def stage_transformer(b: Bench) -> None:
    b.tool("transformer", "bf16-d4096-s2048", "transformer_block",
           ["knobs.precision=bf16", "knobs.optimizer_impl=fused" if not b.smoke else "knobs.optimizer_impl=foreach"])


def _resnet(precision: str, fmt: str, compile_mode: str, smoke: bool) -> list[str]:
    return [f"knobs.precision={precision}", f"knobs.memory_format={fmt}", f"knobs.compile={compile_mode}",
            "knobs.cudnn_benchmark=true", "knobs.optimizer_impl=" + ("foreach" if smoke else "fused"),
            "knobs.batch_size=" + ("2" if smoke else "256")]


def stage_resnet(b: Bench) -> None:
    for precision, fmt in (("fp32", "contiguous"), ("bf16", "contiguous"), ("bf16", "channels_last")):
        b.tool("resnet", f"{precision}-{fmt}", "resnet50", _resnet(precision, fmt, "off", b.smoke))


def stage_compile(b: Bench) -> None:
    b.tool("compile", "bf16-channels_last-compile", "resnet50", _resnet("bf16", "channels_last", "default", b.smoke),
           keep=("graph_breaks",))


# Grids whose every point is recorded once: no re-measurements of the baseline and the best, nor of unstable
# configurations, after the search (on a GPU the profiled ones, hydra.sweeper.profile, still run).
ONCE = ["hydra.sweeper.confirm_top_k=0", "hydra.sweeper.confirm_unstable=false"]


def stage_oom(b: Bench) -> None:
    sizes = "2,4" if b.smoke else "256,2048,4096"
    fixed = {"precision": "fp32", "memory_format": "contiguous", "compile": "'off'", "cudnn_benchmark": "true",
             "optimizer_impl": "foreach" if b.smoke else "fused"}
    cmd = [sys.executable, "-m", "sweeper", "+workload=resnet50", "-m", "hydra.sweeper.sampler=grid",
           f"knobs.batch_size=choice({sizes})", f"results_dir={b.results}", "hydra.sweeper.study_name=oom",
           "hydra.sweeper.n_trials=3", "preset=" + ("tiny" if b.smoke else "none"), *ONCE,
           "hydra.sweeper.params={" + ",".join(f"knobs.{k}:{v}" for k, v in fixed.items()) + "}"]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    (b.out / "logs").mkdir(parents=True, exist_ok=True)
    (b.out / "logs" / "oom-sweep.log").write_text(proc.stdout + proc.stderr)
    import pandas as pd

    df = pd.read_parquet(b.results / "trials")
    df = df[df["study"] == "oom"]
    for _, r in df.sort_values("trial").iterrows():
        b.record("oom", f"bs{r['knob.batch_size']}", status=r["status"], reason=r["reason"],
                 throughput=r["throughput"], peak_mem_bytes=r["peak_mem_bytes"])
    b.record("oom", "sweep", exit_code=proc.returncode, wall_s=time.time() - t0)


JPEG_FIXED = {"precision": "bf16", "memory_format": "channels_last", "compile": "'off'", "cudnn_benchmark": "true",
              "optimizer_impl": "fused", "batch_size": 256, "non_blocking": "true",
              # the decode knobs this stage does not compare, at the workload's defaults (the grid stays 12 points)
              "cpu_decoder": "torchvision", "device_prefetch": "false", "worker_nice": 0, "augment_device": "cpu"}


def _jpeg_fixed(b: Bench) -> dict[str, Any]:
    return {**JPEG_FIXED, **({"optimizer_impl": "foreach", "batch_size": 2} if b.smoke else {})}


def _jpeg_measure(b: Bench) -> list[str]:
    return [] if b.smoke else ["measure.steps=10", "measure.min_time_s=3.0"]


def _jpeg_sweep(b: Bench, study: str, space: dict[str, str], n_trials: int) -> None:
    """A grid sweep of ``space`` (knob -> choice) on resnet50's JPEG pipeline, its rows logged, then its report."""
    fixed = _jpeg_fixed(b)
    params = {**{f"knobs.{k}": v for k, v in fixed.items()}, **{f"knobs.{k}": f'"{v}"' for k, v in space.items()}}
    cmd = [sys.executable, "-m", "sweeper", "+workload=resnet50", "workload.data=jpeg", "-m",
           "hydra.sweeper.sampler=grid", f"hydra.sweeper.study_name={study}", f"hydra.sweeper.n_trials={n_trials}",
           f"results_dir={b.results}", "preset=" + ("tiny" if b.smoke else "none"), *ONCE,
           "++hydra.sweeper.params={" + ",".join(f"{k}:{v}" for k, v in params.items()) + "}",
           '++hydra.sweeper.conditions={knobs.prefetch_factor:"knobs.num_workers > 0",'
           'knobs.transfer_dtype:"knobs.decode_device == \'cpu\'"}']
    _run_logged(b, f"{study}-sweep", cmd + _jpeg_measure(b), 400)
    import pandas as pd

    df = pd.read_parquet(b.results / "trials")
    for _, r in df[df["study"] == study].sort_values("trial").iterrows():
        b.record(study, f"workers{r['knob.num_workers']}-pin{r['knob.pin_memory']}-{r['knob.decode_device']}"
                 f"-{r.get('knob.transfer_dtype') or 'bytes'}",
                 status=r["status"], reason=r.get("reason"),
                 throughput=r["throughput"], data_wait_frac=r["data_wait_frac"],
                 gpu_util_mean=r.get("gpu_util_mean"), gpu_util_p10=r.get("gpu_util_p10"),
                 warmup_steps=r.get("warmup_steps"))
    report = [sys.executable, "-m", "sweeper.report", str(b.results), "--study", study,
              "--out", str(b.out / f"{study}-report.md"), "--html", str(b.out / f"{study}-report.html")]
    _run_logged(b, f"{study}-report", report, 120)


def stage_jpeg(b: Bench) -> None:
    """A real sweep on the JPEG pipeline: num_workers {0, 14} x pin_memory x decode_device (x transfer_dtype with
    cpu decode), then its report.

    The naive configuration (the workload's defaults: decode in the training process) must show a high
    data_wait_frac and low gpu_util; the tuned one must bring data_wait_frac near 0 at the model's speed, and the
    report must name the knobs that did it (speed-up over the baseline, importance).
    """
    _jpeg_sweep(b, "jpeg", {"num_workers": f"choice(0,{2 if b.smoke else 14})", "prefetch_factor": "choice(4)",
                            "pin_memory": "choice(false)" if b.smoke else "choice(false,true)",  # CPU: no pinning
                            "decode_device": "choice(cpu)" if b.smoke else "choice(cpu,cuda)",
                            "transfer_dtype": "choice(float32,uint8)"}, 12)


def stage_jpeg_tuned(b: Bench) -> None:
    """The tuned JPEG pipeline against the model's own speed: the same model knobs on synthetic data (tensors
    already on the device), then CPU decode with pin_memory and prefetch 4 at two worker counts x transfer_dtype."""
    synthetic = [f"knobs.{k}={v}" for k, v in _jpeg_fixed(b).items()]
    b.tool("jpeg_tuned", "synthetic", "resnet50", synthetic + _jpeg_measure(b))
    workers = "choice(1,2)" if b.smoke else "choice(12,14)"
    _jpeg_sweep(b, "jpeg_tuned", {"num_workers": workers, "prefetch_factor": "choice(4)", "pin_memory": "choice(true)",
                                  "decode_device": "choice(cpu)", "transfer_dtype": "choice(float32,uint8)"}, 4)


def _autorange_ms(cfg: dict[str, Any], warmup: int, min_run_time: float) -> tuple[float, int]:
    """Median step time by ``torch.utils.benchmark.Timer.blocked_autorange`` (syncs the device per block), in this
    process, on the same workload code the trial builds: the independent check of the tool's own timing."""
    import gc

    import torch
    from torch.utils.benchmark import Timer

    import workloads

    device = torch.device(cfg["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    work = workloads.load(cfg["workload"]["name"], cfg["workload"].get("module")).build(cfg, device)
    try:
        for _ in range(warmup):
            work.step(work.next_batch())
        timer = Timer(stmt="step(next_batch())", globals={"step": work.step, "next_batch": work.next_batch})
        m = timer.blocked_autorange(min_run_time=min_run_time)
        return m.median * 1e3, m.number_per_run * len(m.times)
    finally:
        work.close()
        del work
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()


STEP_CONFIGS = {  # name -> (workload, overrides): training steps whose timing the accuracy stage checks
    "resnet50-bf16-cl-bs256": ("resnet50", _resnet("bf16", "channels_last", "off", False)),
    "resnet50-fp32-bs128": ("resnet50", ["knobs.precision=fp32", "knobs.batch_size=128", "knobs.cudnn_benchmark=true",
                                         "knobs.optimizer_impl=fused"]),
    "transformer-d4096-s2048-bf16": ("transformer_block", ["knobs.precision=bf16", "knobs.optimizer_impl=fused"]),
    "transformer-d1024-s1024-bf16": ("transformer_block", ["knobs.precision=bf16", "knobs.optimizer_impl=fused",
                                                            "workload.d_model=1024", "workload.n_heads=16",
                                                            "workload.seq_len=1024", "knobs.batch_size=8"]),
}


def stage_accuracy(b: Bench) -> None:
    """The tool's step time vs independent harnesses in the same run (docs/measurements/overhead-and-accuracy.md).

    Kernels: matmul shapes vs ``triton.testing.do_bench``. Steps: the tool's mean step time over its window vs
    ``Timer.blocked_autorange`` run before and after the tool's trial (their mean is the reference).
    """
    if b.smoke:
        cfg = b.config("matmul", ["device=cpu"])
        ms, n = _autorange_ms(cfg, 2, 0.2)
        b.record("accuracy", "smoke-matmul", harness_ms=ms, harness_steps=n)
        return
    for m, n, k, dt in ((4096, 4096, 4096, "bf16"), (8192, 1024, 8192, "bf16"), (4096, 4096, 4096, "fp16"),
                        (16384, 16384, 16384, "bf16")):
        _matmul_pair(b, "accuracy", f"matmul-{m}x{n}x{k}-{dt}", m, n, k, dt)
    for name, (workload, overrides) in STEP_CONFIGS.items():
        overrides = [*overrides, "measure.min_time_s=3.0"]
        cfg = b.config(workload, overrides)
        before, n_before = _autorange_ms(cfg, 10, 3.0)
        tool = b.tool("accuracy", name, workload, overrides, keep=("steps_measured", "measured_s", "step_ms_mean"))
        after, _ = _autorange_ms(cfg, 10, 3.0)
        ref = (before + after) / 2
        tool_ms = 1e3 * tool["measured_s"] / tool["steps_measured"] if tool.get("steps_measured") else float("nan")
        b.record("accuracy", f"{name}-autorange", ref_ms=ref, ref_before_ms=before, ref_after_ms=after,
                 ref_steps=n_before, tool_ms=tool_ms, tool_p50_ms=tool["step_ms_p50"],
                 tool_over_ref_time=tool_ms / ref)


def stage_repeat(b: Bench) -> None:
    """The same configuration in 5 separate trial processes: coefficient of variation of the throughput."""
    import statistics

    configs = {"resnet50-bf16-cl-bs256": ("resnet50", _resnet("bf16", "channels_last", "off", b.smoke)),
               "matmul-8192-bf16": ("matmul", ["knobs.dtype=bf16", "measure.min_time_s=2.0"] if not b.smoke else [])}
    for name, (workload, overrides) in configs.items():
        values = [b.tool("repeat", f"{name}-{i}", workload, overrides)["throughput"] for i in range(5)]
        values = [v for v in values if v]
        if len(values) > 1:
            mean = statistics.fmean(values)
            b.record("repeat", name, trials=len(values), mean=mean, cv=statistics.stdev(values) / mean,
                     spread=(max(values) - min(values)) / mean)


def _run_logged(b: Bench, name: str, cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    (b.out / "logs").mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:  # the output so far: bytes on POSIX even with text=True
        text = "".join(x.decode(errors="replace") if isinstance(x, bytes) else x for x in (e.stdout, e.stderr) if x)
        proc = subprocess.CompletedProcess(cmd, 124, text, "")
    (b.out / "logs" / f"{name}.log").write_text(proc.stdout + proc.stderr)
    print("\n".join((proc.stdout + proc.stderr).splitlines()[-15:])[-3000:], flush=True)
    b.record(name, "run", exit_code=proc.returncode, wall_s=time.time() - t0)
    return proc


def stage_overhead(b: Bench) -> None:
    """bench/overhead.py on this device: per-trial overhead of a matmul sweep (docs/measurements)."""
    extra = [] if b.smoke else ["measure.min_time_s=0.2"]
    _run_logged(b, "overhead", [sys.executable, str(ROOT / "bench" / "overhead.py"), "--trials", "10",
                                "--out", str(b.out / "overhead"), *extra], 300)


def stage_distributed(b: Bench) -> None:
    """bench/distributed_gpu.py: DDP and FSDP sweeps end to end with one rank (3 grid points each)."""
    cmd = [sys.executable, str(ROOT / "bench" / "distributed_gpu.py"), str(b.out / "distributed"), "--trials", "3"]
    _run_logged(b, "distributed", [*cmd, "--smoke"] if b.smoke else cmd, 400)


def stage_fixture(b: Bench) -> None:
    """The report fixture's GPU half: tests/fixtures/report/record.py's matmul grid on this device."""
    sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "report"))
    import record

    args = [*record.MATMUL, "-m", record.MATMUL_SPACE, *record.GRID, "hydra.sweeper.study_name=gpu",
            f"results_dir={b.out / 'fixture'}", "device=" + ("cpu" if b.smoke else "cuda")]
    _run_logged(b, "fixture", [sys.executable, "-m", "sweeper", *args], 300)
    record.combine(b.out / "fixture" / "trials", b.out / "fixture-gpu.parquet")


STAGES = {"matmul": stage_matmul, "transformer": stage_transformer, "resnet": stage_resnet, "oom": stage_oom,
          "compile": stage_compile, "jpeg": stage_jpeg, "jpeg_tuned": stage_jpeg_tuned, "accuracy": stage_accuracy,
          "repeat": stage_repeat,
          "overhead": stage_overhead, "distributed": stage_distributed, "fixture": stage_fixture}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--stages", default=",".join(STAGES))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    b = Bench(args.out, args.smoke)
    print(f"device: {b.info}", flush=True)
    for name in args.stages.split(","):
        t0 = time.time()
        try:
            STAGES[name](b)
        except Exception as e:  # noqa: BLE001 - a broken stage must not lose the others
            b.record(name, "stage-error", error=f"{type(e).__name__}: {e}"[:500])
        print(f"[{name}] stage took {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
