"""The zoo of own workloads (bench/zoo): each model's workload and its independent hand loop agree on sizes and
parameters, each workload trains at its tiny sizes, and the budget bench's table reads the runs' summaries."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import yaml

from conftest import ROOT

ZOO = ROOT / "bench" / "zoo"
MODELS = ("convnext", "gpt", "lstm", "rec", "seg")


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _yaml(model: str) -> dict[str, Any]:
    return yaml.safe_load((ZOO / "conf" / "workload" / f"zoo_{model}.yaml").read_text())


def _choices(spec: str) -> list[int]:
    return [int(v) for v in re.fullmatch(r"choice\((.*)\)", spec).group(1).split(",")]


@pytest.mark.parametrize("model", MODELS)
def test_hand_loop_sizes_are_the_workloads(model: str) -> None:
    hand = _load("hand_zoo", ZOO / "hand_zoo.py")
    conf = _yaml(model)
    tiny = conf["presets"]["tiny"]
    for size, params in (("full", conf["workload"]), ("tiny", {**conf["workload"], **tiny["workload"]})):
        mine = {k: v for k, v in hand.SIZES[model][size].items() if k not in ("batch", "workers")}
        assert mine == {k: params[k] for k in mine}, size
    space = conf["hydra"]["sweeper"]["params"]
    # the handbook's batch: the largest the space gives (its tiny preset's on the CPU)
    assert hand.SIZES[model]["full"]["batch"] == max(_choices(space["knobs.batch_size"]))
    assert hand.SIZES[model]["tiny"]["batch"] == max(_choices(tiny["params"]["knobs.batch_size"]))
    if model == "seg":  # the most workers the space gives
        assert hand.SIZES[model]["full"]["workers"] == max(_choices(space["knobs.num_workers"]))


def test_hand_written_models_have_the_workloads_parameters() -> None:
    hand = _load("hand_zoo", ZOO / "hand_zoo.py")
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    s = hand.SIZES["gpt"]["tiny"]
    gpt = _load("zoo_gpt", ZOO / "zoo_gpt.py")
    sizes = (s["vocab"], s["width"], s["depth"], s["heads"], s["seq_len"])
    assert count(gpt.Decoder(*sizes)) == count(hand.GPT(*sizes))
    s = hand.SIZES["lstm"]["tiny"]
    lstm = _load("zoo_lstm", ZOO / "zoo_lstm.py")
    sizes = (s["vocab"], s["embed"], s["hidden"], s["layers"])
    assert count(lstm.LSTMLanguageModel(*sizes)) == count(hand.LSTMLM(*sizes))
    s = hand.SIZES["rec"]["tiny"]
    rec = _load("zoo_rec", ZOO / "zoo_rec.py")
    sizes = (s["dense"], s["tables"], s["rows"], s["dim"])
    assert count(rec.ClickModel(*sizes)) == count(hand.DLRM(*sizes))


@pytest.mark.parametrize(
    "model", [pytest.param(m, marks=pytest.mark.slow) if m in ("convnext", "seg") else m for m in MODELS]
)  # the two torchvision models: 5-15 s each on a 2-core CPU
def test_zoo_workload_trains_at_its_tiny_sizes(model: str) -> None:
    sys.path.insert(0, str(ZOO))
    try:
        module = _load(f"zoo_{model}", ZOO / f"zoo_{model}.py")
    finally:
        sys.path.remove(str(ZOO))
    conf = _yaml(model)
    tiny = conf["presets"]["tiny"]
    knobs = {**conf["knobs"], **tiny["knobs"], "optimizer_impl": "fused"}
    cfg = {"workload": {**conf["workload"], **tiny["workload"]}, "knobs": knobs}
    work = module.build(cfg, torch.device("cpu"))
    try:
        losses = [float(work.step(work.next_batch())) for _ in range(2)]
    finally:
        work.close()
    assert all(torch.isfinite(torch.tensor(losses))), losses
    assert work.samples_per_step == knobs["batch_size"] * cfg["workload"].get("seq_len", 1)


def test_budget_table_reads_each_runs_summary(tmp_path: Path) -> None:
    bench = _load("budget_sweep", ROOT / "bench" / "budget_sweep.py")
    one, two = tmp_path / "run1", tmp_path / "run2"
    one.mkdir()
    two.mkdir()
    summary = {"case": "gpt", "kind": "summary", "wall_s": 305.2, "budget_s": 300.0, "reference": 400000.0,
               "best": 396000.0, "over_reference": 0.99, "t_99_of_final": 88.4, "t_99_of_reference": None,
               "budget_used": 1.017, "cost_within_30": 0.8, "cost_error_median": -0.05, "trials": 14,
               "statuses": {"complete": 12, "skipped": 2}, "unit": "tokens/s", "model": "decoder LM",
               "ended": "sweep ended: budget: hydra.sweeper.timeout_s=300 s reached",
               "cost_line": "cost model: 9 of 12 trials' predicted wall times within ±30% of the actual "
                            "(median error -4%, worst +85%)"}  # fmt: skip
    earlier = {**summary, "best": 1.0}
    lines = [{"case": "gpt", "kind": "hand", "rows": []}, earlier, summary]
    (one / "budget-gpt.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (two / "budget-seg.jsonl").write_text(json.dumps({"case": "seg", "kind": "hand", "rows": []}) + "\n")
    table = bench.zoo_table([one, two])
    row = next(ln for ln in table.splitlines() if ln.startswith("| gpt "))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells == ["gpt", "decoder LM", "400,000 tokens/s", "396,000 tokens/s", "0.990", "88 s", "never",
                     "305 s / 300 s", "102%", "9/12 = 75% (-4 %)", "14 (12 complete)"]  # fmt: skip
    assert "- gpt: sweep ended: budget: hydra.sweeper.timeout_s=300 s reached" in table
    assert "budget-seg.jsonl: no summary row" in table
    (one / "budget-gpt.jsonl").write_text(json.dumps({**summary, "cost_line": None}) + "\n")  # no line: the rows'
    assert "| 80% (-5%, rows) |" in bench.zoo_table([one])


def test_sweep_end_line_is_read_with_its_wrapped_lines(tmp_path: Path) -> None:
    bench = _load("budget_sweep", ROOT / "bench" / "budget_sweep.py")
    log = tmp_path / "sweep-gpt.log"
    log.write_text(
        "   29.9 budget: no trial fits in the 15 s left\n"
        "   37.7 sweep ended: budget: hydra.sweeper.timeout_s=45 s: no trial fits in the 7 s left\n"
        "   37.7     (nor a promotion); 38 s of the 45 s budget used (85%)\n"
        "   37.7 cost model: 0 of 1 trials' predicted wall times within ±30% of the actual\n"
        "   37.7     (median error +114%, worst +114%)\n"
        "   37.7 zoo_gpt-tiny ━━━━ 3/? study best 6.84 ktokens/s (trial 0) 0:38/0:45\n"
    )
    assert bench.sweep_lines(log, "sweep ended:") == (
        "sweep ended: budget: hydra.sweeper.timeout_s=45 s: no trial fits in the 7 s left "
        "(nor a promotion); 38 s of the 45 s budget used (85%)"
    )
    assert bench.sweep_lines(log, "cost model:").endswith("of the actual (median error +114%, worst +114%)")
    assert bench.sweep_lines(tmp_path / "missing.log", "sweep ended:") is None
