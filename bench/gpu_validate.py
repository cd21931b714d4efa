"""Validate the tool's numbers on a GPU in one call: each stage prints a line and appends it to a JSONL file.

    python bench/gpu_validate.py OUT_DIR [--smoke] [--stages matmul,transformer,resnet,oom,compile,jpeg]

Stages, in priority order (a time-limited GPU job can end mid-way; what finished is already written):
  matmul       the tool's TFLOP/s for bf16/fp16/tf32/fp32 at 8192^3 vs triton.testing.do_bench, same run
  transformer  transformer_block d_model 4096, seq 2048, bf16: MFU
  resnet       resnet50 synthetic batch 256: fp32, bf16, bf16+channels_last (cudnn.benchmark, fused SGD)
  oom          a real CLI sweep over batch sizes that do not fit in fp32: OOM trials infeasible, the rest ranked
  compile      resnet50 bf16+channels_last+torch.compile
  jpeg         resnet50 on the JPEG pipeline: naive (num_workers=0) vs tuned data knobs
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

from sweeper import gpu  # noqa: E402
from sweeper.config import plain, trial_config  # noqa: E402
from sweeper.runner import run_isolated  # noqa: E402


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


def stage_matmul(b: Bench) -> None:
    n = 256 if b.smoke else 8192
    for dtype in ("bf16", "fp16", "tf32", "fp32"):
        b.tool("matmul", dtype, "matmul", [f"knobs.dtype={dtype}", f"workload.m={n}", f"workload.n={n}",
                                            f"workload.k={n}", "measure.steps=50", "measure.warmup_steps=10"])
    if b.info.kind != "cuda":
        return
    import torch
    from triton.testing import do_bench

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32, "fp32": torch.float32}
    for name, dtype in dtypes.items():
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        a = torch.randn(n, n, device="cuda").to(dtype)
        c = torch.randn(n, n, device="cuda").to(dtype)
        ms = do_bench(lambda: torch.matmul(a, c), warmup=100, rep=500, return_mode="median")
        tool = next(r for r in b.rows if r["stage"] == "matmul" and r["name"] == name and "status" in r)
        ref = 2 * n**3 / ms / 1e9
        b.record("matmul", f"{name}-do_bench", tflops=ref, tool_tflops=tool["throughput"],
                 tool_over_ref=(tool["throughput"] or 0) / ref)
    torch.backends.cuda.matmul.allow_tf32 = False


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


def stage_oom(b: Bench) -> None:
    sizes = "2,4" if b.smoke else "256,2048,4096"
    fixed = {"precision": "fp32", "memory_format": "contiguous", "compile": "'off'", "cudnn_benchmark": "true",
             "optimizer_impl": "foreach" if b.smoke else "fused"}
    cmd = [sys.executable, "-m", "sweeper", "+workload=resnet50", "-m", "hydra.sweeper.sampler=grid",
           f"knobs.batch_size=choice({sizes})", f"results_dir={b.results}", "hydra.sweeper.study_name=oom",
           "hydra.sweeper.n_trials=3", "preset=" + ("tiny" if b.smoke else "none"),
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


def stage_jpeg(b: Bench) -> None:
    base = ["workload.data=jpeg", "knobs.precision=bf16", "knobs.memory_format=channels_last",
            "knobs.cudnn_benchmark=true", "knobs.batch_size=" + ("2" if b.smoke else "256")]
    if not b.smoke:
        base += ["workload.corpus_images=4096", "measure.steps=30", "knobs.optimizer_impl=fused"]
    b.tool("jpeg", "naive-workers0", "resnet50", [*base, "knobs.num_workers=0"])
    workers = 2 if b.smoke else 14
    b.tool("jpeg", f"tuned-workers{workers}", "resnet50",
           [*base, f"knobs.num_workers={workers}", "knobs.prefetch_factor=4", "knobs.pin_memory=true",
            "knobs.non_blocking=true", "knobs.persistent_workers=true"])


STAGES = {"matmul": stage_matmul, "transformer": stage_transformer, "resnet": stage_resnet, "oom": stage_oom,
          "compile": stage_compile, "jpeg": stage_jpeg}


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
