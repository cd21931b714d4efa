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
def test_schema_is_registered_and_matches_config_yaml(name: str) -> None:
    from hydra.core.config_store import ConfigStore

    stored = ConfigStore.instance().load(f"schema/{name}.yaml").node
    yaml = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "config.yaml")[name])
    assert OmegaConf.to_container(stored) == OmegaConf.to_container(OmegaConf.merge(stored, yaml)), (
        f"conf/config.yaml's {name} defaults differ from the schema's"
    )


def test_validate_accepts_the_defaults_and_names_the_bad_key() -> None:
    yaml = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "config.yaml"), resolve=False)
    schema.validate({k: yaml[k] for k in schema.SCHEMAS})
    with pytest.raises(ConfigError) as bad:
        schema.validate({"measure": {"warmup_steps": 1, "stepz": 3}})
    assert str(bad.value).startswith("`measure.stepz`: is not a measure setting; did you mean `measure.steps`?")
    with pytest.raises(ConfigError, match=r"^`distributed.bucket_cap_mb`: must be > 0, got 0.0"):
        schema.validate({"distributed": {"bucket_cap_mb": 0}})


def test_workloads_read_distributed_settings_through_the_same_schema() -> None:
    assert isinstance(parallel.settings({"strategy": "ddp"}), parallel.DistributedConf)
    with pytest.raises(ValueError, match="distributed.comm_hook must be one of"):
        parallel.settings({"comm_hook": "int8"})
