"""A CPU sweep's fresh Inductor cache is warmed by a tiny compile beside its first trials
(``sweeper.trial.warm_cache``): a real process, a real compile, a real cache folder."""

from __future__ import annotations

import types
from pathlib import Path

import pandas as pd
from optuna.distributions import CategoricalDistribution

from sweeper.sweep.config.trial_config import knob_class, load_workload
from sweeper.trial import warm_cache

from conftest import NO_REMEASURE, run_main


def space(compile_choices: tuple[str, ...] | None = None, fixed: dict | None = None) -> types.SimpleNamespace:
    params = {} if compile_choices is None else {"knobs.compile": CategoricalDistribution(compile_choices)}
    return types.SimpleNamespace(params=params, fixed=fixed or {})


TRANSFORMER = knob_class(load_workload({"name": "transformer_block"}))  # the package's training knobs


def cfg(cache: Path | None, device: str = "cpu") -> dict:
    return {"device": device, "env": {"TORCHINDUCTOR_CACHE_DIR": str(cache)} if cache else {}}


def test_a_fresh_cache_is_warmed_once_and_then_left_alone(tmp_path: Path) -> None:
    cache = tmp_path / "inductor_cache"
    proc = warm_cache.start(cfg(cache), space(("off", "default")), {"knobs.compile": "off"}, TRANSFORMER)
    assert proc is not None
    assert proc.wait(300) == 0, (cache / warm_cache.LOG).read_text()
    assert (cache / warm_cache.MARKER).exists()
    assert any(p.suffix in (".so", ".py") for p in cache.rglob("*")), sorted(cache.rglob("*"))  # what it built
    assert warm_cache.start(cfg(cache), space(("off", "default")), {}, TRANSFORMER) is None  # warmed: not again


def test_only_a_cpu_sweep_that_may_compile_into_a_cache_warms_it(tmp_path: Path) -> None:
    cache = tmp_path / "c"
    on = space(("off", "default"))
    assert warm_cache.start(cfg(cache, "cuda:0"), on, {}, TRANSFORMER) is None  # no one-time part there
    assert warm_cache.start(cfg(None), on, {}, TRANSFORMER) is None  # no cache to warm
    assert warm_cache.start(cfg(cache), space(("off",)), {}, TRANSFORMER) is None  # nothing compiles
    assert warm_cache.start(cfg(cache), space(), {"knobs.compile": "off"}, TRANSFORMER) is None  # not searched, off
    own = {"name": "costly", "module": str(Path(__file__).parent / "faultload" / "costly.py")}
    assert warm_cache.start(cfg(cache), on, {}, knob_class(load_workload(own))) is None  # its own "compile"
    assert not cache.exists()
    assert warm_cache.compiles(space(), {"knobs.compile": "default"}, TRANSFORMER)  # not searched, on by default
    assert warm_cache.compiles(space(fixed={"knobs.compile": "max-autotune"}), {"knobs.compile": "off"}, TRANSFORMER)
    assert not warm_cache.compiles(space(fixed={"knobs.compile": "off"}), {"knobs.compile": "default"}, TRANSFORMER)


def test_the_sweeps_end_stops_a_warm_up_still_running(tmp_path: Path) -> None:
    proc = warm_cache.start(cfg(tmp_path / "c"), space(("off", "default")), {}, TRANSFORMER)
    assert proc is not None
    warm_cache.stop(proc, wait_s=30)
    assert proc.poll() is not None
    assert not (tmp_path / "c" / warm_cache.MARKER).exists()


def test_a_cpu_sweep_whose_space_compiles_starts_its_caches_warm_up(results: Path) -> None:
    """The sweep itself (through the real CLI) warms its trials' cache: ``compile_cache_dir`` under the results."""
    space_arg = "hydra.sweeper.params={knobs.compile:'choice(off,default)',knobs.batch_size:'choice(2,4)'}"
    run_main(["+workload=transformer_block", "-m", "hydra.sweeper.n_trials=1", space_arg, *NO_REMEASURE], results,
             check=True)  # fmt: skip
    assert (pd.read_parquet(results / "trials")["status"] == "complete").any()
    assert (results / "inductor_cache" / warm_cache.LOG).exists()
