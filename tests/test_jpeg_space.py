"""resnet50's default space sweeps the input-pipeline knobs on the JPEG pipeline only, in a study of its own.

Real CLI sweeps (the tiny preset, automatic on the CPU) into one results folder: a synthetic one, then a JPEG one.
"""

from __future__ import annotations

from pathlib import Path

import optuna
import pandas as pd
import pytest

from conftest import NO_REMEASURE, run_main

DATA_KNOBS = ["knob.num_workers", "knob.prefetch_factor", "knob.pin_memory", "knob.non_blocking",
              "knob.decode_device"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    results = tmp_path_factory.mktemp("jpeg_space") / "results"
    run_main(["+workload=resnet50", "-m", "hydra.sweeper.n_trials=2", "hydra.sweeper.seed=0", *NO_REMEASURE], results,
            check=True)
    run_main(["+workload=resnet50", "workload.data=jpeg", "-m", "hydra.sweeper.n_trials=6", "hydra.sweeper.seed=0",
             *NO_REMEASURE], results, check=True)
    return results, pd.read_parquet(results / "trials").sort_values(["study", "trial"]).reset_index(drop=True)


def test_data_sources_get_their_own_studies(swept: tuple[Path, pd.DataFrame]) -> None:
    results, df = swept
    assert df.groupby("study").size().to_dict() == {"resnet50-tiny": 2, "resnet50-jpeg-tiny": 6}
    names = optuna.get_all_study_names(storage=f"sqlite:///{results / 'optuna.db'}")
    assert sorted(names) == ["resnet50-jpeg-tiny", "resnet50-tiny"]
    assert (df["preset"] == "tiny").all()


def test_jpeg_sweep_samples_the_data_knobs(swept: tuple[Path, pd.DataFrame]) -> None:
    _, df = swept
    jpeg = df[df["study"] == "resnet50-jpeg-tiny"]
    assert set(jpeg["status"]) <= {"complete", "skipped"}, jpeg[["status", "reason", "message"]]
    assert (jpeg["status"] == "complete").sum() >= 2
    # A GPU decode (cuda, or the hybrid split) or the side-stream device prefetch cannot run on this CPU: skipped
    # before launch with the reason; every CPU-only configuration runs.
    skipped = jpeg[jpeg["status"] == "skipped"]
    gpu_decode = jpeg["knob.decode_device"].isin(["cuda", "hybrid"])
    gpu_prefetch = jpeg["knob.device_prefetch"].fillna(False).astype(bool) & ~gpu_decode
    gpu_augment = (jpeg["knob.augment_device"] == "cuda") & ~gpu_decode
    assert ((gpu_decode | gpu_prefetch | gpu_augment) == (jpeg["status"] == "skipped")).all(), jpeg[
        [*DATA_KNOBS, "knob.augment_device", "reason"]
    ]
    assert gpu_decode.any(), "the workload's starts decode on the GPU"
    assert jpeg.loc[gpu_decode, "reason"].str.match(r"invalid:knobs\.decode_device=(cuda|hybrid) ").all()
    assert jpeg.loc[gpu_prefetch, "reason"].str.match(r"invalid:knobs\.device_prefetch=true ").all()
    assert jpeg.loc[gpu_augment, "reason"].str.match(r"invalid:knobs\.augment_device=cuda ").all()
    assert skipped["steps_measured"].isna().all()

    # Active on the JPEG pipeline: every row has a value, drawn from the tiny preset's space.
    assert jpeg["knob.num_workers"].notna().all() and set(jpeg["knob.num_workers"]) <= {0, 2}
    assert jpeg["knob.pin_memory"].notna().all() and set(jpeg["knob.pin_memory"]) <= {False, True}
    assert jpeg["knob.decode_device"].notna().all() and jpeg["knob.non_blocking"].notna().all()
    assert jpeg["knob.num_workers"].nunique() == 2, "seed 0 draws both worker counts in 6 trials"
    # prefetch_factor exists only with worker processes.
    no_workers = jpeg["knob.num_workers"] == 0
    assert (jpeg["knob.prefetch_factor"].isna() == no_workers).all(), jpeg[DATA_KNOBS]
    assert set(jpeg.loc[~no_workers, "knob.prefetch_factor"]) <= {2, 4}

    complete = jpeg[jpeg["status"] == "complete"]
    assert (complete["throughput"] > 0).all()
    assert (complete["data_decode_device"] == "cpu").all() and (complete["data_corpus_images"] == 64).all()
    assert (jpeg["baseline"] == (jpeg["trial"] == 0)).all(), "the defaults (num_workers=0, ...) are measured first"


def test_synthetic_sweep_leaves_the_data_knobs_inactive(swept: tuple[Path, pd.DataFrame]) -> None:
    _, df = swept
    synthetic = df[df["study"] == "resnet50-tiny"]
    assert (synthetic["status"] == "complete").all(), synthetic[["status", "reason", "message"]]
    for col in DATA_KNOBS:
        assert synthetic[col].isna().all(), f"{col} is inactive on synthetic data"
    assert synthetic["knob.precision"].notna().all()

# End-to-end sweeps of real workloads: `python -m pytest -m "not slow"` skips them.
pytestmark = pytest.mark.slow
