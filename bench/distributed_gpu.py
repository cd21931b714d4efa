"""DDP and FSDP sweeps end to end on one GPU: the real CLI, grid over the distributed knobs, one table.

    python bench/distributed_gpu.py RESULTS_DIR [--nproc 1] [--trials N] [--smoke]

Runs, each through ``python -m sweeper`` (Parquet rows land in ``RESULTS_DIR/trials``):

* a single-process baseline of each workload (``distributed.strategy=none``);
* ``bench-ddp-resnet50``: ResNet-50 (bf16, channels_last, bs 256) under DDP, grid over ``bucket_cap_mb`` x
  ``comm_hook`` x ``gradient_as_bucket_view``;
* ``bench-fsdp-transformer``: a 4-layer d=2048 transformer under FSDP2, grid over ``sharding`` x
  ``param_dtype`` x ``cpu_offload``, two objectives (throughput up, peak memory per GPU down).

With one GPU (``--nproc 1``, the default) collectives are trivial: this checks the whole path (launcher, NCCL
process group, wrapping, metrics, rows) and the memory/speed cost of each setting, not scaling. Then it prints
one table (also written to ``RESULTS_DIR/distributed_gpu.csv``). ``--smoke`` runs the same on the CPU with
tiny models and 2 gloo ranks, to check the script itself.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RESNET = ["+workload=resnet50", "knobs.precision=bf16", "knobs.memory_format=channels_last", "knobs.batch_size=256",
          "knobs.optimizer_impl=fused", "knobs.cudnn_benchmark=true"]
TRANSFORMER = ["+workload=transformer_block", "workload.d_model=2048", "workload.n_heads=16", "workload.n_layers=4",
               "knobs.precision=bf16", "knobs.batch_size=4"]
SMOKE = {  # the tiny presets' sizes, spelled out (a preset would add its own search space)
    "resnet50": ["preset=none", "device=cpu", "workload.image_size=32", "workload.num_classes=10",
                 "knobs.precision=fp32", "knobs.batch_size=2", "knobs.optimizer_impl=foreach",
                 "knobs.cudnn_benchmark=false", "measure.warmup_steps=1", "measure.steps=3"],
    "transformer_block": ["preset=none", "device=cpu", "workload.d_model=64", "workload.n_heads=4",
                          "workload.n_layers=2", "workload.seq_len=32", "knobs.precision=fp32", "knobs.batch_size=2",
                          "measure.warmup_steps=2", "measure.steps=5"],
}
SWEEPS = [
    ("bench-ddp-resnet50", RESNET, "ddp", {
        "distributed.bucket_cap_mb": "choice(1,25,100)",
        "distributed.comm_hook": "choice(none,bf16)",
        "distributed.gradient_as_bucket_view": "choice(false,true)",
    }, "[{metric:throughput,direction:maximize}]"),
    ("bench-fsdp-transformer", TRANSFORMER, "fsdp", {
        "distributed.sharding": "choice(FULL_SHARD,SHARD_GRAD_OP,NO_SHARD,HYBRID_SHARD)",
        "distributed.param_dtype": "choice(fp32,bf16)",
        "distributed.cpu_offload": "choice(false,true)",
    }, "[{metric:throughput,direction:maximize},{metric:peak_mem_bytes,direction:minimize}]"),
]


def cli(args: list[str], results: Path) -> int:
    cmd = [sys.executable, "-m", "sweeper", *args, f"results_dir={results}"]
    print("$", " ".join(cmd), flush=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(cmd, cwd=ROOT, env=env).returncode


def fixed_args(base: list[str], smoke: bool) -> list[str]:
    if not smoke:
        return [*base, "device=cuda:0"]
    workload = base[0].split("=", 1)[1]
    return [base[0], *SMOKE[workload]]


def pinned_space(args: list[str]) -> str:
    """``hydra.sweeper.params={...}`` pinning every knob the workload's YAML sweeps to this run's value.

    Hydra merges dicts, so the workload's own search space cannot be dropped, only overridden key by key.
    """
    from omegaconf import OmegaConf

    workload = args[0].split("=", 1)[1]
    conf = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "workload" / f"{workload}.yaml"))
    given = dict(a.split("=", 1) for a in args[1:] if "=" in a)
    pinned = []
    for key in conf["hydra"]["sweeper"]["params"]:
        section, name = key.split(".", 1)
        value = given.get(key, conf.get(section, {}).get(name))
        value = "null" if value is None else str(value).lower() if isinstance(value, bool) else value
        pinned.append(f"{key}:{value}")  # Hydra's grammar types it (256 -> int, bf16 -> str)
    return "hydra.sweeper.params={" + ",".join(pinned) + "}"


def run_all(results: Path, nproc: int, trials: int | None, smoke: bool) -> None:
    for study, base, strategy, params, objectives in SWEEPS:
        args = fixed_args(base, smoke)
        cli([*args, "distributed.strategy=none"], results)  # baseline: one process, no wrapper
        grid = math.prod(len(v.split(",")) for v in params.values())
        cli([*args, "-m", f"hydra.sweeper.study_name={study}", "hydra.sweeper.sampler=grid",
             f"hydra.sweeper.n_trials={min(grid, trials or grid)}", f"hydra.sweeper.objectives={objectives}",
             pinned_space(args), f"distributed.strategy={strategy}", f"distributed.nproc={nproc}",
             *[f"{k}={v}" for k, v in params.items()]], results)


def setting(row: dict) -> str:
    """What ran, read back from the wrapped module (the ``ddp_*``/``fsdp_*`` columns)."""
    def get(key: str) -> object:
        v = row.get(key)
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    if get("ddp_bucket_cap_bytes") is not None:
        return (f"ddp bucket={row['ddp_bucket_cap_bytes'] / 2**20:g}MiB ({int(row['ddp_num_buckets'])} buckets) "
                f"hook={row['ddp_comm_hook']} view={bool(row['ddp_gradient_as_bucket_view'])}")
    if get("fsdp_mesh") is not None:
        sharding = get("knob.distributed.sharding") or "?"
        return (f"fsdp {sharding} mesh={row['fsdp_mesh']} reshard={get('fsdp_reshard_after_forward')} "
                f"param={get('fsdp_param_dtype')} on={row['fsdp_param_device']}")
    strategy = get("knob.distributed.strategy")
    return "single process" if strategy in (None, "none") else str(strategy)


def table(results: Path, since: float) -> None:
    import pandas as pd
    from rich.console import Console
    from rich.table import Table

    from sweeper.results.store import read_results

    df = read_results(results)
    if df.empty:
        print("no rows")
        return
    df = df[pd.to_datetime(df["started_at"], utc=True) >= pd.Timestamp(since, unit="s", tz="UTC")]
    df = df.sort_values(["workload", "study", "trial"], na_position="first")
    out = Table(title=f"distributed trials ({len(df)} rows) in {results}")
    cols = ["workload", "study/trial", "status", "setting", "throughput", "step ms p50", "peak mem GiB",
            "comm frac", "world"]
    for c in cols:
        out.add_column(c, justify="right" if c not in ("workload", "study/trial", "status", "setting") else "left")
    rows = []
    for r in df.to_dict("records"):
        trial = "" if r.get("trial") is None or (isinstance(r["trial"], float) and math.isnan(r["trial"])) \
            else f"/{int(r['trial'])}"
        status = r["status"] if r["status"] == "complete" else f"{r['status']} ({r.get('reason')})"

        def num(key: str, scale: float = 1.0, fmt: str = "{:.4g}") -> str:
            v = r.get(key)
            return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v * scale)

        cells = [r["workload"], f"{r['study']}{trial}", status, setting(r), num("throughput"), num("step_ms_p50"),
                 num("peak_mem_bytes", 2**-30, "{:.2f}"), num("comm_frac", 1, "{:.3f}"), num("world_size", 1, "{:g}")]
        out.add_row(*cells)
        rows.append(dict(zip(cols, cells)))
    Console(width=200).print(out)
    path = results / "distributed_gpu.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    print(f"table written to {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="results folder (Parquet rows go to <results>/trials)")
    ap.add_argument("--nproc", type=int, default=None, help="ranks per trial (default 1; 2 with --smoke)")
    ap.add_argument("--trials", type=int, default=None, help="at most this many trials per sweep (default: the grid)")
    ap.add_argument("--smoke", action="store_true", help="tiny models on the CPU with gloo ranks")
    args = ap.parse_args()
    results = args.results.resolve()
    since = time.time()
    run_all(results, args.nproc or (2 if args.smoke else 1), args.trials, args.smoke)
    table(results, since)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
