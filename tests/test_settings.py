"""The sweeper's settings have one home: ``sweeper.sweep.config.settings.KnobSweeperConf``.

Every ``hydra.sweeper`` key a shipped YAML writes is a field of the dataclass, none of them restates the
dataclass's default, and no sweeper module falls back to a default of its own (``conf.get("n_trials", 10)``).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import yaml

from sweeper.sweep.config.settings import COMPILE_PRIOR, KnobSweeperConf, settings_of

ROOT = Path(__file__).resolve().parent.parent
YAMLS = sorted(
    [*ROOT.glob("conf/**/*.yaml"), *ROOT.glob("examples/**/*.yaml"), *ROOT.glob("bench/**/conf/**/*.yaml"),
     *ROOT.glob("tests/faultload/conf/**/*.yaml")]
)  # fmt: skip
FIELDS = {f.name: f for f in dataclasses.fields(KnobSweeperConf)}


def _default(name: str) -> object:
    f = FIELDS[name]
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _sweeper_block(path: Path) -> dict:
    data = yaml.safe_load(path.read_text()) or {}
    return ((data.get("hydra") or {}).get("sweeper") or {}) if isinstance(data, dict) else {}


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(ROOT)))
def test_yaml_sweeper_keys_are_fields_and_restate_no_default(path: Path) -> None:
    block = _sweeper_block(path)
    for key, value in block.items():
        assert key in FIELDS, f"{path}: hydra.sweeper.{key} is not a field of KnobSweeperConf"
        if key in ("params", "conditions", "constraints"):
            continue  # the search space is the workload's own, not a setting with a default
        assert value != _default(key), f"{path}: hydra.sweeper.{key}={value!r} restates the dataclass default"


def test_the_yamls_were_read() -> None:
    assert any(_sweeper_block(p) for p in YAMLS), "no YAML with a hydra.sweeper block was found"


def test_no_sweeper_module_keeps_a_default_of_its_own() -> None:
    offenders = []
    for path in sorted((ROOT / "sweeper" / "sweep").rglob("*.py")):  # the sub-packages too
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in FIELDS
                and node.args[0].value not in ("params", "conditions", "constraints", "starts", "objectives")
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} .get({node.args[0].value!r}, ...)")
    assert not offenders, offenders


def test_settings_convert_once_with_the_dataclass_defaults() -> None:
    s = settings_of({"n_trials": 3, "expensive": {"knobs.compile": "off"}, "pruner": {"type": "median"}})
    assert isinstance(s, KnobSweeperConf) and s.n_trials == 3 and s.grace_s == _default("grace_s")
    assert s.expensive == {"knobs.compile": "off"} and isinstance(s.expensive, dict)
    assert s.pruner.type == "median" and s.pruner.reduction_factor == 3


def test_the_composed_config_carries_the_dataclass_defaults() -> None:
    """What a command sees under ``hydra.sweeper`` with nothing set (conf/config.yaml and a workload's YAML composed
    by Hydra) is the dataclass's default, key for key (the re-measurements' ``confirm_top_k`` 1, ``confirm_unstable``
    on), apart from the search space the workload declares."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import hydra_plugins.knob_sweeper.knob_sweeper  # noqa: F401 - registers hydra/sweeper=knob

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["+workload=matmul"], return_hydra_config=True)
    composed = OmegaConf.to_container(cfg.hydra.sweeper, resolve=False)
    defaults = dataclasses.asdict(KnobSweeperConf())
    for key in ("params", "conditions", "constraints"):  # the search space is the workload's
        composed.pop(key, None)
        defaults.pop(key, None)
    assert composed == defaults
    assert (composed["confirm_top_k"], composed["confirm_unstable"]) == (1, True)
    assert composed["cost_prior"] == {"knobs.compile": COMPILE_PRIOR}  # torch.compile's modes, for every workload


def test_the_composed_config_composes_the_typed_nodes_from_their_dataclasses() -> None:
    """conf/config.yaml writes no default of ``measure``, ``trial`` or ``distributed``: its defaults list composes
    them from the dataclasses (``<node>_defaults``), so every key can be set without ``+`` and holds its one default;
    a workload's YAML still changes them (matmul measures 50 steps)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import hydra_plugins.knob_sweeper.knob_sweeper  # noqa: F401 - registers <node>_defaults
    from sweeper.trial.conf import NODES, RunConf

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(
            "config", overrides=["+workload=transformer_block", "trial.resources.gpus=1", "distributed.strategy=ddp"]
        )
    composed = OmegaConf.to_container(cfg, resolve=False)
    for node, cls in NODES.items():
        assert set(composed[node]) == {f.name for f in dataclasses.fields(cls)}, node
    assert composed["distributed"] == {**dataclasses.asdict(NODES["distributed"]()), "strategy": "ddp"}
    assert composed["trial"]["resources"] == {"gpus": 1, "cpus": None}
    assert composed["measure"]["steps"] == 10 and composed["measure"]["stall_s"] == NODES["measure"].stall_s
    run = dataclasses.asdict(RunConf())
    assert {k: composed[k] for k in run} == run  # the top-level keys, from RunConf (compile_cache_dir unresolved)


def test_the_choices_are_literals_checked_in_one_line() -> None:
    """The sampler and the pruner's type are ``Literal`` choices of the dataclass (the plan's sampler and pruner
    lists are theirs); a value outside them, or a pruner setting of the wrong type, is one line naming the key."""
    import typing

    from sweeper.errors import ConfigError
    from sweeper.sweep.config.settings import PrunerConf, check_sweeper
    from sweeper.sweep.search.prune import PRUNERS
    from sweeper.sweep.search.samplers import SAMPLERS

    hints = typing.get_type_hints(KnobSweeperConf)
    assert typing.get_args(hints["sampler"]) == SAMPLERS and "staged" in SAMPLERS
    assert typing.get_args(typing.get_type_hints(PrunerConf)["type"]) == PRUNERS
    check_sweeper(
        dataclasses.asdict(settings_of({"sampler": "tpe", "pruner": {"type": "hyperband", "min_resource": 2}}))
    )
    for given, message in (
        ({"sampler": "bayes"}, "`hydra.sweeper.sampler`: 'bayes' is not a sampler; use one of: staged, tpe,"),
        (
            {"pruner": {"type": "asha"}},
            "`hydra.sweeper.pruner.type`: 'asha' is not a pruner; use one of: none, median,",
        ),
        ({"pruner": {"min_resource": "x"}}, "`hydra.sweeper.pruner.min_resource`: 'x' is not an integer or auto"),
    ):
        with pytest.raises(ConfigError) as bad:
            check_sweeper(dataclasses.asdict(settings_of(given)))
        assert str(bad.value).startswith(message), str(bad.value)


def test_the_pruner_reads_its_typed_settings() -> None:
    """``make_pruner`` builds from :class:`PrunerConf` (or the mapping a trial's context carries): the
    dataclass's defaults, not defaults of its own."""
    import optuna

    from sweeper.sweep.config.settings import PrunerConf
    from sweeper.sweep.search.prune import make_pruner, pruner_conf

    assert pruner_conf(None) == PrunerConf() and pruner_conf({"type": "median"}).n_startup_trials == 3
    median = make_pruner({"type": "median", "n_warmup_steps": 2})
    assert isinstance(median, optuna.pruners.MedianPruner)
    assert (median._n_startup_trials, median._n_warmup_steps) == (PrunerConf.n_startup_trials, 2)
    halving = make_pruner(PrunerConf(type="successive_halving"))
    assert isinstance(halving, optuna.pruners.SuccessiveHalvingPruner) and halving._min_resource is None
    assert isinstance(make_pruner(PrunerConf(type="hyperband")), optuna.pruners.HyperbandPruner)  # auto: 1 step
    assert isinstance(make_pruner(None), optuna.pruners.NopPruner)
