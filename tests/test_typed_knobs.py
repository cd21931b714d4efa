"""Typed knobs: each workload's knob class (``workloads.spec``) against its YAML, and bad values before launch."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from optuna.distributions import CategoricalDistribution

from sweeper.errors import ConfigError
from sweeper.sweep.config.space import parse_param
from sweeper.sweep.config.trial_config import check_enumerations
from workloads.spec import MatmulKnobs, ResNet50Knobs, TrainingKnobs, TransformerBlockKnobs, typed

ROOT = Path(__file__).resolve().parent.parent
KNOB_CLASSES: dict[str, type] = {
    "resnet50": ResNet50Knobs,
    "matmul": MatmulKnobs,
    "transformer_block": TransformerBlockKnobs,
}
EXAMPLE = ROOT / "examples" / "my_project"


def _yaml(name: str) -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "workload" / f"{name}.yaml"), resolve=False)


def _swept_values(conf: dict[str, Any]) -> dict[str, list[Any]]:
    """knob -> every value the YAML's space, its presets' spaces and its starts may give it."""
    sweeper = conf.get("hydra", {}).get("sweeper", {})
    spaces = [
        sweeper.get("params") or {},
        *[(p or {}).get("params") or {} for p in (conf.get("presets") or {}).values()],
    ]
    out: dict[str, list[Any]] = {}
    for space in spaces:
        for key, text in space.items():
            parsed = parse_param(key, text)
            values = list(parsed.choices) if isinstance(parsed, CategoricalDistribution) else [parsed]
            out.setdefault(key, []).extend(values)
    for start in sweeper.get("starts") or []:
        for key, value in start.items():
            out.setdefault(key, []).append(value)
    for preset in (conf.get("presets") or {}).values():
        for key, value in ((preset or {}).get("knobs") or {}).items():
            out.setdefault(f"knobs.{key}", []).append(value)
    return {k[len("knobs.") :]: v for k, v in out.items() if k.startswith("knobs.")}


def _inherited(cls: type) -> set[str]:
    """Fields a knob class takes from a base class (their default lives there, in one place)."""
    return {f.name for base in cls.__mro__[1:] if dataclasses.is_dataclass(base) for f in dataclasses.fields(base)}


@pytest.mark.parametrize("name", sorted(KNOB_CLASSES))
def test_the_yaml_knobs_are_the_knob_class_defaults(name: str) -> None:
    cls, yaml_knobs = KNOB_CLASSES[name], _yaml(name)["knobs"]
    defaults = typed.defaults(cls)
    unknown = sorted(set(yaml_knobs) - set(defaults))
    differ = {
        k: (yaml_knobs[k], defaults[k])
        for k in sorted(set(yaml_knobs) & set(defaults))
        if yaml_knobs[k] != defaults[k] or type(yaml_knobs[k]) is not type(defaults[k])
    }
    # a field the YAML leaves out must come from a shared base class, whose default is then the only one
    unlisted = sorted(set(defaults) - set(yaml_knobs) - _inherited(cls))
    assert (unknown, differ, unlisted) == ([], {}, []), (
        f"conf/workload/{name}.yaml's knobs against {cls.__name__}: knobs the class lacks {unknown}; "
        f"defaults differing (yaml, class) {differ}; the class's own knobs missing from the YAML {unlisted}"
    )


@pytest.mark.parametrize("name", sorted(KNOB_CLASSES))
def test_the_yaml_space_stays_within_the_knob_class_choices(name: str) -> None:
    cls = KNOB_CLASSES[name]
    swept = _swept_values(_yaml(name))
    assert swept, f"{name}: no knob is swept"
    outside = typed.problems(cls, {k: v for k, v in swept.items()})
    unknown = sorted(set(swept) - set(typed.defaults(cls)))
    assert (outside, unknown) == ([], []), (
        f"conf/workload/{name}.yaml's space against {cls.__name__}: values outside the class's choices "
        f"(knob, value, allowed) {outside}; swept knobs the class lacks {unknown}"
    )


def test_the_example_models_space_stays_within_the_helpers_choices() -> None:
    conf = OmegaConf.to_container(OmegaConf.load(EXAMPLE / "conf" / "workload" / "mlp.yaml"), resolve=False)
    swept = {k: v for k, v in _swept_values(conf).items() if k != "batch_size"}  # the model's own knob
    assert typed.problems(TrainingKnobs, swept) == []
    assert set(swept) <= set(typed.defaults(TrainingKnobs))


@pytest.mark.parametrize(
    ("workload", "key", "value", "message"),
    [
        (
            "resnet50",
            "knobs.precision",
            "fp8",
            "`knobs.precision`: 'fp8' is not a value workload 'resnet50' can run; use one of: fp32, tf32, fp16, bf16, "
            "fp32-strict",
        ),
        (
            "resnet50",
            "knobs.decode_device",
            ["cpu", "tpu"],
            "`knobs.decode_device`: 'tpu' is not a value workload 'resnet50' can run; use one of: cpu, cuda, hybrid",
        ),
        (
            "resnet50",
            "knobs.batch_size",
            "big",
            "`knobs.batch_size`: 'big' is not a value workload 'resnet50' can run; give an integer",
        ),
        (
            "resnet50",
            "knobs.pin_memory",
            "yes",
            "`knobs.pin_memory`: 'yes' is not a value workload 'resnet50' can run; give true or false",
        ),
        (
            "transformer_block",
            "knobs.activation_checkpointing",
            "half",
            "`knobs.activation_checkpointing`: 'half' is not a value workload 'transformer_block' can run; "
            "use one of: off, all or an integer",
        ),
        (
            "matmul",
            "knobs.dtype",
            "fp64",
            "`knobs.dtype`: 'fp64' is not a value workload 'matmul' can run; use one of: fp32, tf32, fp16, bf16",
        ),
    ],
)
def test_a_bad_knob_value_is_a_config_error_naming_key_value_and_choices(
    workload: str, key: str, value: Any, message: str
) -> None:
    with pytest.raises(ConfigError) as bad:
        check_enumerations({key: value}, workload)
    assert str(bad.value) == message


def test_good_values_and_null_pass_and_unknown_knobs_are_left_to_the_workload() -> None:
    check_enumerations(
        {
            "knobs.precision": ["fp32", "bf16"],
            "knobs.activation_checkpointing": [2, "all"],
            "knobs.gpu_share": 0.5,
            "knobs.cuda_connections": None,
            "knobs.my_own": "x",
        },
        "resnet50",
    )


def test_a_users_model_on_the_helpers_is_checked_against_the_training_knobs() -> None:
    with pytest.raises(ConfigError, match=r"^`knobs.compile`: 'fast' is not a value workload 'mlp' can run; use one"):
        check_enumerations({"knobs.compile": "fast"}, "mlp", str(EXAMPLE / "mlp_bench.py"))
    check_enumerations({"knobs.compile": "default", "knobs.width_factor": "any"}, "mlp", str(EXAMPLE / "mlp_bench.py"))


def test_a_knob_class_instance_takes_defaults_for_missing_and_null_knobs() -> None:
    k = typed.of(TransformerBlockKnobs, {"batch_size": 8, "precision": None, "unrelated": 1})
    assert (k.batch_size, k.precision, k.sdpa_backend, k.grad_accum_steps) == (8, "bf16", "auto", 1)
