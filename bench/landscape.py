"""Record a full grid of a knob space with the tool's own grid sampler, then export it as a small landscape file.

    python bench/landscape.py record RESULTS_DIR [--chunk N]     # run (or continue) the grid sweep
    python bench/landscape.py seed RESULTS_DIR EARLIER.parquet   # a new study starts from an earlier export
    python bench/landscape.py export RESULTS_DIR OUT.parquet [--also EARLIER.parquet]
                                                                  # one row per configuration + the space
    python bench/landscape.py ... --smoke [matmul|costly]         # a tiny grid on the CPU: matmul's (checks the
                                                                  # script), or tests/faultload's costly workload
                                                                  # (compile expensive by construction)

The GPU landscape is ResNet-50 on the JPEG pipeline: precision x memory_format x batch_size x num_workers x
prefetch_factor (only with workers) x pin_memory = 2 x 2 x 2 x (1 + 4 x 2) x 2 = 144 configurations (compile
pinned off, see GPU below). ``record`` is one
``python -m sweeper ... -m`` with the grid sampler on the study ``landscape``; run it again (same RESULTS_DIR) to
append the next chunk: the study resumes, and the sweep stops by itself when the grid is exhausted.
``export`` writes what ``bench/sampler_efficiency.py`` replays; the search space travels in the file's metadata.
``seed`` carries configurations measured by an earlier record (whose study database is gone, e.g. on a machine that
was given back) into a new study as finished grid points, so ``record`` measures only the rest; ``export --also``
puts their rows back next to the new ones.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # hydra_plugins/ (the sweeper's config) for seed's compose
STUDY = "landscape"

# compile is pinned off and cudnn_benchmark false (the workload's defaults): on the H200 a compiled ResNet-50 step
# costs ~42-81 s to compile cold and ~7-8 s from a warm Inductor cache per trial process, and cuDNN's autotuning
# 10-17 s per trial process; across a 144-point grid either costs hours of GPU time. The default
# sweep (``python -m sweeper +workload=resnet50 -m``) still sweeps both.
# precision: the recorded H200 landscape (2026-11-29) ran its fp32 half with cuDNN's TF32 off, the tool's fp32
# then; that setting is ``fp32-strict`` since fp32 became PyTorch's default, so the spec (and the file's labels)
# say fp32-strict, and a new record measures what the file holds.
GPU = {
    "workload": "resnet50",
    "fixed": ["workload.data=jpeg", "preset=none", "measure.warmup_steps=3", "measure.steps=3",
              "measure.min_time_s=1.5"],
    "params": {"knobs.precision": "choice(fp32-strict,bf16)", "knobs.memory_format": "choice(contiguous,channels_last)",
               "knobs.batch_size": "choice(128,256)", "knobs.num_workers": "choice(0,3,6,10,14)",
               "knobs.prefetch_factor": "choice(2,4)", "knobs.pin_memory": "choice(false,true)",
               "knobs.compile": "off", "knobs.cudnn_benchmark": "false", "knobs.optimizer_impl": "fused",
               "knobs.non_blocking": "true", "knobs.decode_device": "cpu",
               "knobs.transfer_dtype": "float32", "knobs.worker_nice": 0, "knobs.augment_device": "cpu"},
    "conditions": {"knobs.prefetch_factor": "knobs.num_workers > 0"},
}
SMOKE = {
    "workload": "matmul",
    "fixed": [],
    "params": {"knobs.dtype": "choice(fp32,bf16)", "knobs.transpose_a": "choice(false,true)",
               "knobs.transpose_b": "choice(false,true)", "knobs.bf16_reduced_precision": "choice(true,false)",
               "knobs.fp16_reduced_precision": "choice(true,false)"},
    "conditions": {"knobs.bf16_reduced_precision": "knobs.dtype == 'bf16'",
                   "knobs.fp16_reduced_precision": "knobs.dtype == 'fp16'"},
}

# tests/faultload/costly.py: a step sleeps, compile multiplies its speed by a batch-dependent factor and costs a
# second of setup; 4 x 2 x 3 = 24 configurations whose wall_s make the cost-aware replay meaningful on a CPU.
COSTLY = {
    "workload": "costly",
    "fixed": ["hydra.searchpath=[file://tests/faultload/conf]", "measure.steps=3"],
    "params": {"knobs.level": "choice(1,2,4,6)", "knobs.batch": "choice(1,2)",
               "knobs.compile": "choice(off,default,max)"},
    "conditions": {},
}


def _dict_override(key: str, d: dict[str, str]) -> str:
    return f"{key}={{" + ",".join(f'{k}:"{v}"' for k, v in d.items()) + "}"


def _overrides(spec: dict, results: Path) -> list[str]:
    return [f"+workload={spec['workload']}", "hydra.sweeper.sampler=grid", f"hydra.sweeper.study_name={STUDY}",
            f"results_dir={results}", _dict_override("++hydra.sweeper.params", spec["params"]),
            _dict_override("++hydra.sweeper.conditions", spec["conditions"]), *spec["fixed"]]


def record(spec: dict, results: Path, chunk: int, timeout_s: float | None) -> int:
    cmd = [sys.executable, "-m", "sweeper", "-m", *_overrides(spec, results), f"hydra.sweeper.n_trials={chunk}",
           f"hydra.sweeper.timeout_s={timeout_s if timeout_s else 'null'}",
           "hydra.sweeper.confirm_top_k=0", "hydra.sweeper.confirm_unstable=false"]  # each point once, no repeats
    return subprocess.run(cmd, cwd=ROOT).returncode


def _earlier(spec: dict, path: Path) -> pd.DataFrame:
    """An earlier export's rows, with the knobs this spec pins (absent from older files) filled in."""
    df = pd.read_parquet(path)
    for key, value in spec["params"].items():
        col = f"knob.{key.split('.', 1)[1]}"
        if col not in df and "(" not in value:
            df[col] = {"true": True, "false": False}.get(value, value)
    return df


def seed(spec: dict, results: Path, earlier: Path) -> int:
    """Add an earlier export's measured configurations (status complete) to a new ``landscape`` study as finished
    grid points (an earlier out-of-memory row is not carried: ``record`` measures it again).

    Each becomes a COMPLETE trial with the grid id and search space Optuna's GridSampler records, and the
    ``config_key``/``status`` the sweep's duplicate check reads: the grid sampler counts it as visited, and a later
    ask that lands on it again is answered from it without running (a duplicate). Returns how many were added.
    """
    import optuna
    from hydra import compose, initialize_config_dir
    from optuna.trial import TrialState, create_trial

    from sweeper.sweep.run.launch import resolve_space
    from sweeper.sweep.search import samplers
    from sweeper.sweep.study import trials as studies

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        config = compose("config", overrides=_overrides(spec, results), return_hydra_config=True)
    # The space exactly as ``record``'s sweep resolves it (knobs pinned under a condition stay one-value choices):
    # the same config keys for the duplicate check, the same grid for the sampler.
    _cfg, space, _defaults, _fixed = resolve_space(config, config.hydra.sweeper, list(config.hydra.overrides.task))
    sampler = samplers.make_sampler("grid", None, space)  # the sweep's own, with the same (default) seed
    storage = studies.make_storage(studies.storage_url(None, results))
    study = optuna.create_study(study_name=STUDY, storage=storage, sampler=sampler, direction="maximize",
                                load_if_exists=True)
    if study.get_trials(deepcopy=False):
        raise SystemExit(f"study {STUDY!r} in {results} already has trials: seed only a new one")
    grid, names = sampler._all_grids, sampler._param_names  # noqa: SLF001 - the ids the sampler itself assigns
    added = 0
    for _, row in _earlier(spec, earlier).iterrows():
        if row["status"] != "complete":
            continue
        values: dict = {}
        for name, dist in space.params.items():
            v = row[f"knob.{name.split('.', 1)[1]}"]
            values[name] = None if pd.isna(v) else next((c for c in dist.choices if c == v), v)
            if values[name] is not None and values[name] not in dist.choices:
                raise SystemExit(f"{earlier}: {name}={v!r} is not in the space {spec['params'][name]}")
        ids = [i for i, g in enumerate(grid)
               if all(values[n] is None or g[j] == values[n] for j, n in enumerate(names))]
        key = json.dumps(values, sort_keys=True, default=str)
        for gid in ids:  # an inactive knob (prefetch_factor without workers) covers all of its grid points
            study.add_trial(create_trial(
                state=TrialState.COMPLETE, value=float(row["throughput"]),
                params={n: v for n, v in values.items() if v is not None},
                distributions={n: space.params[n] for n, v in values.items() if v is not None},
                user_attrs={"config_key": key, "status": "complete", "throughput": float(row["throughput"]),
                            "seeded_from": earlier.name},
                system_attrs={"grid_id": gid, "search_space": sampler._search_space}))  # noqa: SLF001
        added += 1
    print(f"seeded {added} configurations from {earlier} into study {STUDY!r} ({results})")
    return added


def export(spec: dict, results: Path, out: Path, also: Path | None = None) -> pd.DataFrame:
    """One row per distinct configuration (duplicates of the grid collapse onto the measured one)."""
    from sweeper.report.data import read_rows

    df = read_rows(results)
    df = df[(df["study"] == STUDY) & df["status"].isin(["complete", "infeasible"])]
    if also is not None:  # seeded configurations: their rows live in the earlier file
        df = pd.concat([_earlier(spec, also), df], ignore_index=True)
    cols = [f"knob.{k.split('.', 1)[1]}" for k in spec["params"] if k.startswith("knobs.")]
    keep = cols + ["status", "throughput", "throughput_unit", "peak_mem_bytes", "data_wait_frac", "gpu_util_mean",
                   "mfu", "gpu_name", "torch_version", "started_at", "wall_s", "setup_s", "first_step_s", "compile_s"]
    land = df[[c for c in keep if c in df.columns]].drop_duplicates(subset=cols, keep="last")
    table = pa.Table.from_pandas(land.reset_index(drop=True), preserve_index=False)
    base = df[df["baseline"].fillna(False).astype(bool)] if "baseline" in df else df.iloc[:0]
    defaults = {}
    if len(base):  # the workload's defaults, when the grid holds them: what the default sampler measures first
        row = base.iloc[0]
        defaults = {k: row[f"knob.{k.split('.', 1)[1]}"] for k in spec["params"]
                    if "(" in spec["params"][k] and pd.notna(row[f"knob.{k.split('.', 1)[1]}"])}
        defaults = {k: v.item() if hasattr(v, "item") else v for k, v in defaults.items()}
    elif also is not None:  # the baseline was measured by the earlier record
        defaults = json.loads(pq.read_schema(also).metadata[b"knob_sweeper"]).get("defaults") or {}
    from omegaconf import OmegaConf

    path = ROOT / "conf" / "workload" / f"{spec['workload']}.yaml"
    if not path.exists():
        path = ROOT / "tests" / "faultload" / "conf" / "workload" / f"{spec['workload']}.yaml"
    sweeper_conf = OmegaConf.to_container(OmegaConf.load(path)).get("hydra", {}).get("sweeper", {})
    meta = {"params": spec["params"], "conditions": spec["conditions"], "workload": spec["workload"],
            "defaults": defaults,  # what a new study of this workload measures first, and what it holds cheap
            "starts": sweeper_conf.get("starts") or [], "expensive": sweeper_conf.get("expensive") or {}}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"knob_sweeper": json.dumps(meta).encode()})
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    print(f"{len(land)} configurations -> {out}")
    return land


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["record", "seed", "export"])
    p.add_argument("results", type=Path)
    p.add_argument("out", type=Path, nargs="?")
    p.add_argument("--chunk", type=int, default=1000, help="trials this call adds (the grid stops it anyway)")
    p.add_argument("--timeout-s", type=float, default=None,
                   help="start no new trial after this many seconds (run record again to continue)")
    p.add_argument("--also", type=Path, help="export: an earlier export whose rows were seeded into this study")
    p.add_argument("--smoke", nargs="?", const="matmul", choices=["matmul", "costly"],
                   help="a tiny CPU grid instead of the GPU one")
    args = p.parse_args()
    spec = {None: GPU, "matmul": SMOKE, "costly": COSTLY}[args.smoke]
    if args.action == "record":
        sys.exit(record(spec, args.results, args.chunk, args.timeout_s))
    if args.out is None:
        p.error(f"{args.action} needs a Parquet file")
    if args.action == "seed":
        seed(spec, args.results, args.out)
        return
    export(spec, args.results, args.out, args.also)


if __name__ == "__main__":
    main()
