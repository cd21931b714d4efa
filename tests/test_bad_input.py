"""Bad input: one line naming the key and the fix, exit code 2, no traceback, before any trial starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_main

KNOWN = "matmul, resnet50, transformer_block"
OWN = ("a workload of your own: add `-cd <your conf dir>` (the folder holding workload/{}.yaml), or "
       "`hydra.searchpath=[file://<your conf dir>]`")
COSTLY = ["hydra.searchpath=[file://tests/faultload/conf]", "+workload=costly"]
CASES = [
    (["+workload=nope"], f"`workload`: unknown workload 'nope'; known: {KNOWN}; {OWN.format('nope')}"),
    (["+workload=matmu"],
     f"`workload`: unknown workload 'matmu'; did you mean +workload=matmul? known: {KNOWN}; {OWN.format('matmu')}"),
    (["+workload=matmul", "storage=sqlit"],
     "`storage`: unknown storage 'sqlit'; did you mean storage=sqlite? known: journal, postgres, sqlite"),
    # every key of the command has a suggestion: the sweeper's settings too, and the keys beside an unknown one
    (["+workload=matmul", "-m", "hydra.sweeper.timeout=60"],
     "`hydra.sweeper.timeout`: is not a setting of the sweeper; did you mean `hydra.sweeper.timeout_s`?"),
    (["+workload=matmul", "-m", "+hydra.sweeper.timeout=60"],
     "`hydra.sweeper.timeout`: is not a setting of the sweeper; did you mean `hydra.sweeper.timeout_s`?"),
    (["+workload=matmul", "-m", "hydra.sweeper.pruner.typ=median"],
     "`hydra.sweeper.pruner.typ`: is not a setting of the sweeper; did you mean `hydra.sweeper.pruner.type`?"),
    (["+workload=matmul", "-m", "+hydra.sweeper.zzz=1"],
     "`hydra.sweeper.zzz`: is not a setting of the sweeper; `hydra.sweeper` has: baseline_first, conditions, "
     "confirm_top_k, confirm_unstable, constraints, cost_prior, cost_prior_per_op, expensive, grace_period, grace_s, "
     "graph_neutral, handbook_start, ... (21 more: `--cfg hydra` lists them)"),
    (["+workload=matmul", "-m", "hydra/launcher=joblb"],
     "`hydra/launcher`: unknown hydra/launcher 'joblb'; did you mean hydra/launcher=joblib? known: basic, joblib, "
     "submitit_local, submitit_slurm"),
    (["+workload=matmul", "-m", "hydra.job.chdirr=true"],
     "`hydra.job.chdirr`: is not a Hydra setting; did you mean `hydra.job.chdir`?"),
    (["+workload=matmul", "-m", "hydra.launcher.n_jobs=2"],
     "`hydra.launcher.n_jobs`: is not a Hydra setting; `hydra.launcher` has no settings in this config; choose a "
     "hydra/launcher=<option> that has it"),
    (["+workload=matmul", "knob.dtype=fp32"],
     "`knob.dtype`: is not a key of this workload's config; did you mean `knobs.dtype`?"),
    (["+workload=matmul", "measure.zzz=1"],
     "`measure.zzz`: is not a key of this workload's config; `measure` has: count_ops, end_at, max_steps, "
     "min_time_s, profile_steps, rel_precision, stall_s, steps, warmup_steps"),
    (["+workload=matmul", "trial.resources.gpu=1"],
     "`trial.resources.gpu`: is not a key of this workload's config; did you mean `trial.resources.gpus`?"),
    (["-m"], f"`workload`: no workload selected; add +workload=<name>; known workloads: {KNOWN}"),
    (["+workload=matmul", "knobs.dtyp=fp32"],
     "`knobs.dtyp`: is not a key of this workload's config; did you mean `knobs.dtype`?"),
    (["+workload=resnet50", "-m", "knobs.batchsize=choice(32,64)"],
     "`knobs.batchsize`: is not a key of this workload's config; did you mean `knobs.batch_size`?"),
    (["+workload=resnet50", "-m", "knobs.batch_size=interval(64,8)"],
     "`knobs.batch_size`: `low < high` must hold, but got (lo=64.0, hi=8.0); swap the bounds"),
    (["+workload=resnet50", "-m", "knobs.batch_size=range(8,1)"],
     "`knobs.batch_size`: range(8,1) is empty (stop is excluded, as in Hydra); "
     "use start < stop for a positive step, or start > stop for a negative one"),
    (["+workload=resnet50", "-m", "knobs.batch_size=choice(2,big)"],
     "`knobs.batch_size`: the space's value 'big' is str but the knob's value 2 is int; give the knob and its "
     "space values of one type (quote a string that reads as a number: '3.0')"),
    (["+workload=matmul", "-m", "hydra.sweeper.objectives=[{metric:tokens,direction:maximize}]"],
     "`hydra.sweeper.objectives[0].metric`: 'tokens' is not a metric workload 'matmul' produces; use one of: "
     "achieved_tflops, comm_frac, comm_ms_per_step, compile_s, data_wait_frac, data_wait_host_frac, first_step_s, "
     "gpu_util_mean, gpu_util_p10, host_step_frac, launch_s, measured_s, mfu, peak_mem_bytes, peak_mem_reserved_bytes, "
     "setup_s, step_cv, step_ms_mean, step_ms_p10, step_ms_p50, step_ms_p50_rank_min, step_ms_p90, throughput, "
     "world_size"),
    (["+workload=matmul", "-m", "hydra.sweeper.objectives=[{metric:throughput,direction:up}]"],
     "`hydra.sweeper.objectives[0].direction`: 'up' is not a direction; use maximize or minimize"),
    (["+workload=matmul", "-m", "hydra.sweeper.objectives=[{direction:minimize}]"],
     "`hydra.sweeper.objectives[0].metric`: is missing; write each objective as {metric: <name>, "
     "direction: maximize|minimize}"),
    (["+workload=matmul", "-m", "hydra.sweeper.objectives=[{metric:throughput,dir:maximize}]"],
     "`hydra.sweeper.objectives`: 'dir' is not a field of ObjectiveConf; write each objective as {metric: <name>, "
     "direction: maximize|minimize}"),
    (["+workload=matmul", "-m", "hydra.sweeper.pruner.min_resource=some"],
     "`hydra.sweeper.pruner.min_resource`: 'some' is not an integer or auto; give an integer or auto"),
    (["+workload=matmul", "-m", "distributed.sharding=ZERO3"],
     "`distributed.sharding`: must be one of ('FULL_SHARD', 'SHARD_GRAD_OP', 'NO_SHARD', 'HYBRID_SHARD'), got "
     "'ZERO3'; use one of: FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD"),
    (["+workload=matmul", "-m", "hydra.sweeper.storage=postgresql+psycopg://nobody@127.0.0.1:9/nodb"],
     None),  # message checked by prefix below: it carries the driver's own reason
    (["+workload=matmul", "-m", "++hydra.sweeper.cost_prior={knobs.dtype:{fp16:2}}"],
     "`hydra.sweeper.cost_prior.knobs.dtype`: is not a knob of hydra.sweeper.expensive; give priors for the "
     "expensive knobs only, e.g. knobs.compile"),
    (["+workload=resnet50", "-m", "++hydra.sweeper.cost_prior_per_op={knobs.compile:{default:-1}}"],
     "`hydra.sweeper.cost_prior_per_op.knobs.compile.default`: must be a number > 0, got -1; give the seconds of a "
     "cold compile per distinct operation of the eager step, e.g. 0.27"),
    (["+workload=matmul", "-m", "hydra.sweeper.sampler=bayes"],
     "`hydra.sweeper.sampler`: 'bayes' is not a sampler; use one of: staged, tpe, random, grid, gp, nsgaii, qmc"),
    ([*COSTLY, "-m", "++hydra.sweeper.expensive={knobs.compiled:'off'}"],
     "`hydra.sweeper.expensive.knobs.compiled`: is not a key of this workload's config; did you mean "
     "`knobs.compile`?"),
    ([*COSTLY, "-m", "hydra.sweeper.expensive={knobs.compile:fast}"],
     "`hydra.sweeper.expensive.knobs.compile`: the cheap value 'fast' is not one its search space gives "
     "(off, default, max); give the value that makes a trial cheap, e.g. knobs.compile: \"off\""),
    (["+workload=matmul", "-m", "hydra.sweeper.warm_start=night1"],
     "`hydra.sweeper.warm_start`: no study 'night1' in this storage (studies: none); name a study of this "
     "storage, or use latest"),
    (["+workload=matmul", "-m", "hydra.sweeper.n_trials=0"],
     "`hydra.sweeper.n_trials`: must be >= 1, got 0; give the number of trials this command should add"),
    (["+workload=matmul", "-m", "hydra.sweeper.timeout_s=0"],
     "`hydra.sweeper.timeout_s`: must be > 0 seconds, got 0.0; give the command's wall-clock budget in seconds, "
     "or null for no limit"),
    (["+workload=resnet50", "-m", 'hydra.sweeper.params={knobs.persistent_workers:"choice(false,true)"}'],
     "`hydra.sweeper.params`: `hydra.sweeper.params=` can only replace entries the workload already has, not add "
     "`knobs.persistent_workers`; add entries with `++hydra.sweeper.params={...}`, or sweep a knob directly: "
     "knobs.persistent_workers='choice(...)'"),
    (["+workload=matmul", "device=tpu"], "`device`: 'tpu' is not a device; use auto, cpu, cuda or cuda:N"),
    (["+workload=matmul", "preset=huge"],
     "`preset`: 'huge' is not a preset of workload 'matmul'; use auto, none or one of: nightly, tiny"),
    (["+workload=matmul", "-m", "hydra.job.chdir=true", "hydra.sweeper.n_jobs=2"],
     "`hydra.job.chdir`: is process-wide, and trials run at once in the sweeper's process; turn it off (trial "
     "environment variables go in `env:`), or run one trial at a time"),
    (["+workload=matmul", "-m", "hydra.sweeper.starts=[{knobs.dtyp:bf16}]"],
     "`hydra.sweeper.starts[0].knobs.dtyp`: is not a key of this workload's config; did you mean `knobs.dtype`?"),
    (["+workload=matmul", "-m", "hydra.sweeper.starts=[bf16]"],
     "`hydra.sweeper.starts[0]`: must be a mapping of config keys to values, got 'bf16'; write it as "
     "{knobs.precision: bf16, knobs.num_workers: 8}"),
    (["+workload=matmul", "-m", "+hydra.sweeper.conditions={knobs.dtype:'knobs.dtyp == 1'}"],
     "`hydra.sweeper.conditions.knobs.dtype`: refers to `knobs.dtyp`, which is not a key of this workload's "
     "config; did you mean `knobs.dtype`?"),
    (["+workload=matmul", "-m", "hydra.sweeper.sampler=grid", "knobs.allow_tf32=choice(true,false)",
      "knobs.m=interval(64,128)"],
     "`knobs.m`: is not a key of this workload's config; `knobs` has: allow_tf32, bf16_reduced_precision, dtype, "
     "fp16_reduced_precision, transpose_a, transpose_b"),
    (["+workload=matmul", "-m", "hydra.sweeper.sampler=grid", "measure.min_time_s=interval(0.0,0.1)"],
     "`measure.min_time_s`: the grid sampler needs a discrete space, but got FloatDistribution(high=0.1, log=False, "
     "low=0.0, step=None); declare it with choice(...) or range(...), or pick another sampler"),
    # the typed schemas of measure, trial and distributed (sweeper.sweep.config.schema), single run and sweep
    (["+workload=matmul", "measure.steps=abc"], "`measure.steps`: 'abc' is not an integer; give an integer"),
    (["+workload=matmul", "-m", "measure.steps=0"],
     "`measure.steps`: must be >= 1, got 0; give the number of measured steps"),
    (["+workload=matmul", "-m", "distributed.strategy=bogus"],
     "`distributed.strategy`: must be one of ('none', 'ddp', 'fsdp'), got 'bogus'; use one of: none, ddp, fsdp"),
    (["+workload=matmul", "trial.timeout_s=0"],
     "`trial.timeout_s`: must be > 0 seconds, got 0.0; give the seconds a trial may run"),
]


@pytest.mark.parametrize("args,expected", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2(results: Path, args: list[str], expected: str | None) -> None:
    proc = run_main(args, results)  # in this process: the command's own code path, without its start-up
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    if expected is None:
        assert lines[0].startswith("error: `hydra.sweeper.storage`: cannot open 'postgresql+psycopg://nobody@")
        assert lines[0].endswith("check the URL, that the server runs and the database exists "
                                 "(default: leave it null for a SQLite file under results/)")
    else:
        assert lines[0] == f"error: {expected}"
    trials = results / "trials"
    assert not trials.exists() or not any(trials.iterdir()), "no trial ran"
