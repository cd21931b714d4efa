"""The typed config schemas (measure, trial, distributed): documented per field, registered, equal to the YAML."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sweeper.errors import ConfigError
from sweeper.sweep.config import schema
from workloads import parallel

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(schema.SCHEMAS))
def test_every_field_has_a_docstring(name: str) -> None:
    cls = schema.SCHEMAS[name]
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    documented = {
        stmt.target.id
        for stmt, nxt in zip(body, body[1:])
        if isinstance(stmt, ast.AnnAssign)
        and isinstance(nxt, ast.Expr)
        and isinstance(nxt.value, ast.Constant)
        and isinstance(nxt.value.value, str)
    }
    assert {f.name for f in dataclasses.fields(cls)} - documented == set()


@pytest.mark.parametrize("name", sorted(schema.SCHEMAS))
def test_schema_and_defaults_are_registered_and_config_yaml_composes_them(name: str) -> None:
    """``schema/<name>`` is the typed schema (its OmegaConf twin), ``<name>_defaults`` its defaults, which
    conf/config.yaml's defaults list composes at ``<name>`` instead of restating them."""
    from hydra.core.config_store import ConfigStore

    import hydra_plugins.knob_sweeper.knob_sweeper  # noqa: F401 - registers <name>_defaults

    defaults = dataclasses.asdict(schema.SCHEMAS[name]())
    stored = ConfigStore.instance().load(f"schema/{name}.yaml").node
    assert OmegaConf.to_container(stored) == defaults
    assert OmegaConf.to_container(ConfigStore.instance().load(f"{name}_defaults.yaml").node) == defaults
    config = OmegaConf.load(ROOT / "conf" / "config.yaml")
    assert f"{name}_defaults@{name}" in OmegaConf.to_container(config.defaults)
    assert name not in config, f"conf/config.yaml restates the {name} node: its defaults live in the dataclass"


def test_validate_accepts_the_defaults_and_names_the_bad_key() -> None:
    schema.validate({k: dataclasses.asdict(cls()) for k, cls in schema.SCHEMAS.items()})
    with pytest.raises(ConfigError) as bad:
        schema.validate({"measure": {"warmup_steps": 1, "stepz": 3}})
    assert str(bad.value).startswith("`measure.stepz`: is not a measure setting; did you mean `measure.steps`?")
    with pytest.raises(ConfigError, match=r"^`distributed.bucket_cap_mb`: must be > 0, got 0.0"):
        schema.validate({"distributed": {"bucket_cap_mb": 0}})


def test_a_choice_is_one_of_its_literal_values() -> None:
    """The ``Literal`` choices are checked at the validation point, one line naming the key and the fix; the
    typed object comes back (not the OmegaConf twin)."""
    with pytest.raises(ConfigError, match=r"^`distributed.strategy`: must be one of \('none', 'ddp', 'fsdp'\), got "):
        schema.validate({"distributed": {"strategy": "zero3"}})
    with pytest.raises(
        ConfigError, match=r"^`distributed.param_dtype`: must be one of \(None, 'fp32', 'bf16', 'fp16'\)"
    ):
        schema.validate({"distributed": {"param_dtype": "fp8"}})
    with pytest.raises(ConfigError, match=r"^`distributed.strategy`: \[1\] is not one of none, ddp, fsdp; give one of"):
        schema.validate({"distributed": {"strategy": [1]}})  # refused by OmegaConf's type check: the choices named
    typed = schema.check("distributed", schema.SCHEMAS["distributed"], {"strategy": "fsdp", "param_dtype": "bf16"})
    assert isinstance(typed, parallel.DistributedConf) and (typed.strategy, typed.sharding) == ("fsdp", "FULL_SHARD")
    trial = schema.check("trial", schema.SCHEMAS["trial"], {"resources": {"gpus": 1}})
    assert type(trial).__module__ == "sweeper.trial.conf" and trial.resources.gpus == 1 and trial.lock_dir is None


def test_workloads_read_distributed_settings_through_the_same_schema() -> None:
    assert isinstance(parallel.settings({"strategy": "ddp"}), parallel.DistributedConf)
    with pytest.raises(ValueError, match="distributed.comm_hook must be one of"):
        parallel.settings({"comm_hook": "int8"})
