"""Every default of a typed config lives in its dataclass, once.

The typed configs: the sweeper's settings (``hydra.sweeper``, :class:`KnobSweeperConf` and its nested
:class:`PrunerConf`), the trial config's typed nodes (``measure``, ``trial`` with ``trial.resources``,
``distributed``: ``sweeper.trial.conf.NODES``) and the workloads' knob classes (``workloads.spec``). A YAML value
that equals a dataclass default restates it (a second place to change, which then silently disagrees), nested
fields included; so does a ``.get("<field>", <literal>)`` in code, which falls back to a default of its own.
"""

from __future__ import annotations

import ast
import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from sweeper.sweep.config.settings import KnobSweeperConf, ObjectiveConf, PrunerConf
from sweeper.trial.conf import MeasureConf, RunConf, TrialConf
from workloads.spec import DataKnobs, MatmulKnobs, ResNet50Knobs, TrainingKnobs, TransformerBlockKnobs
from workloads.spec.distributed import DistributedConf

ROOT = Path(__file__).resolve().parent.parent
NODES: dict[str, type] = {"measure": MeasureConf, "trial": TrialConf, "distributed": DistributedConf}
YAMLS = sorted(
    [
        *ROOT.glob("conf/**/*.yaml"),
        *ROOT.glob("examples/**/*.yaml"),
        *ROOT.glob("bench/**/conf/**/*.yaml"),
        *ROOT.glob("tests/faultload/conf/**/*.yaml"),
    ]
)
# Where each typed config sits in a YAML file (a preset's values are not defaults: they change the workload's).
TYPED_NODES: dict[tuple[str, ...], type] = {
    ("hydra", "sweeper"): KnobSweeperConf,
    **{(n,): c for n, c in NODES.items()},
    (): RunConf,  # the top-level keys (device, preset, results_dir, ...)
}
SEARCH_SPACE = ("params", "conditions", "constraints")  # the workload's own, not settings with a default
# The report reads rows, which may predate a column: there the fallback is what the row's writer did then.
READS_OF_OLD_ROWS = {"sweeper/report/recipe_dist.py:d.get('wrap_blocks', True)"}
KNOB_CLASSES = (DataKnobs, MatmulKnobs, ResNet50Knobs, TrainingKnobs, TransformerBlockKnobs)
SETTINGS_CLASSES = (KnobSweeperConf, PrunerConf, ObjectiveConf, RunConf, *NODES.values())


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def restated(cls: type, values: dict[str, Any], where: str) -> list[str]:
    """``where.key=value`` for each value of ``values`` that equals ``cls``'s default, nested dataclasses walked."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name not in values or f.name in SEARCH_SPACE:
            continue
        value = values[f.name]
        item = typing.get_args(hints[f.name])[0] if typing.get_origin(hints[f.name]) is list else None
        if dataclasses.is_dataclass(hints[f.name]) and isinstance(value, dict):
            out += restated(hints[f.name], value, f"{where}.{f.name}")
        elif dataclasses.is_dataclass(item) and isinstance(value, list):  # a list of them (objectives)
            if value == [dataclasses.asdict(v) for v in _default(f)]:
                out.append(f"{where}.{f.name}={value!r}")
            for i, element in enumerate(value):
                out += restated(item, element, f"{where}.{f.name}[{i}]") if isinstance(element, dict) else []
        elif value == _default(f) and type(value) is type(_default(f)) or value is None is _default(f):
            out.append(f"{where}.{f.name}={value!r}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and value == _default(f):
            out.append(f"{where}.{f.name}={value!r}")  # 900 restates 900.0
    return out


def placed(path: Path) -> dict[str, Any]:
    """The YAML's content where Hydra puts it: at its ``# @package`` (``_global_``: the root), else at its group's
    folder (a primary config: the root)."""
    text = path.read_text()
    data = yaml.safe_load(text) or {}
    first = text.splitlines()[0] if text else ""
    if first.startswith("# @package"):
        package = first.split("@package", 1)[1].strip()
        parts = [] if package == "_global_" else package.split(".")
    else:
        conf_dir = next((q for q in path.parents if (q / "config.yaml").exists() or q.name == "conf"), path.parent)
        parts = list(path.parent.relative_to(conf_dir).parts)
    for part in reversed(parts):
        data = {part: data}
    return data if isinstance(data, dict) else {}


def restated_in(path: Path) -> list[str]:
    data = placed(path)
    out = []
    for at, cls in TYPED_NODES.items():
        node: Any = data
        for part in at:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            out += [r.lstrip(".") for r in restated(cls, node, ".".join(at))]
    return out


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_yaml_restates_a_dataclass_default(path: Path) -> None:
    assert not restated_in(path), f"{path.relative_to(ROOT)} restates: {restated_in(path)}"


def test_the_walk_sees_nested_fields_and_the_yamls() -> None:
    """The check itself: a nested default (``trial.resources.gpus: null``, ``hydra.sweeper.pruner.type: none``)
    is found, a changed value is not, and the YAMLs that hold typed nodes were read."""
    trial = {"resources": {"gpus": None, "cpus": 8}, "timeout_s": 900}
    assert sorted(restated(NODES["trial"], trial, "trial")) == [
        "trial.resources.gpus=None",
        "trial.timeout_s=900",
    ]
    pruner = {"pruner": {"type": "none", "reduction_factor": 2}}
    assert restated(KnobSweeperConf, pruner, "hydra.sweeper") == ["hydra.sweeper.pruner.type='none'"]
    assert restated(NODES["measure"], {"steps": 50, "stall_s": 30}, "measure") == []
    objectives = {"objectives": [{"metric": "throughput", "direction": "maximize"}]}
    assert restated(KnobSweeperConf, objectives, "s") == [
        "s.objectives=[{'metric': 'throughput', 'direction': 'maximize'}]",
        "s.objectives[0].direction='maximize'",
    ]
    assert sum(1 for p in YAMLS if any(n in placed(p) for n in NODES)) >= 4
    assert placed(ROOT / "conf" / "storage" / "journal.yaml")["hydra"]["sweeper"]["storage"].startswith("journal:")


def _typed_fields() -> dict[str, list[str]]:
    """Field name -> the typed classes that declare it."""
    out: dict[str, list[str]] = {}
    for cls in (*SETTINGS_CLASSES, *KNOB_CLASSES):
        for f in dataclasses.fields(cls):
            if f.name != "_target_":  # Hydra's, not a setting
                out.setdefault(f.name, []).append(cls.__name__)
    return out


def _literal(node: ast.expr) -> bool:
    """A default written in place: a constant other than None, or a container of constants."""
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return all(_literal(e) or isinstance(e, ast.Constant) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(isinstance(k, ast.Constant) for k in node.keys if k is not None)
    return isinstance(node, ast.UnaryOp) and isinstance(node.operand, ast.Constant)


def gets_with_a_default(source: str, fields: dict[str, list[str]]) -> list[tuple[int, str]]:
    """(line, call) for each ``.get("<typed field>", <literal>)`` in ``source``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in fields
            and node.args[0].value not in SEARCH_SPACE
            and _literal(node.args[1])
        ):
            out.append((node.lineno, ast.unparse(node)))
    return out


def test_no_code_falls_back_to_a_default_of_its_own() -> None:
    """Every module of sweeper/ and workloads/ (sub-packages included): after validation, code reads the typed
    object or the trial config, which holds every key; a ``.get("steps", 20)`` would keep a second default."""
    fields = _typed_fields()
    offenders = []
    for root in ("sweeper", "workloads", "hydra_plugins"):
        for path in sorted((ROOT / root).rglob("*.py")):
            for line, call in gets_with_a_default(path.read_text(), fields):
                if f"{path.relative_to(ROOT)}:{call}" in READS_OF_OLD_ROWS:
                    continue
                name = call.split("(", 1)[1].split(",", 1)[0]
                offenders.append(f"{path.relative_to(ROOT)}:{line} {call} ({', '.join(fields[eval(name)])})")
    assert not offenders, "\n".join(offenders)


def test_the_scan_finds_a_get_with_a_default() -> None:
    fields = _typed_fields()
    found = gets_with_a_default(
        "a = cfg['measure'].get('steps', 20)\nb = p.get('type', 'none')\nc = d.get('steps')\ne = f.get('other', 1)",
        fields,
    )
    assert [line for line, _call in found] == [1, 2]


def test_the_lock_dir_default_is_the_same_wherever_it_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """``trial.lock_dir: null`` means the node-wide folder (``slots.default_lock_dir``), whatever ``results_dir``
    is: the code does so, and no doc, YAML or docstring says it is under the results folder."""
    import inspect

    from sweeper.sweep.run.slots import LOCK_DIR_ENV, default_lock_dir, node_lock_dir

    monkeypatch.delenv(LOCK_DIR_ENV, raising=False)
    trial = dataclasses.asdict(NODES["trial"]())
    assert node_lock_dir({"trial": trial, "results_dir": "elsewhere"}) == default_lock_dir()
    assert "knob-sweeper-<user>/locks" in inspect.getsource(NODES["trial"])
    texts = [ROOT / "README.md", *ROOT.glob("docs/*.md"), *YAMLS, *ROOT.glob("sweeper/**/*.py")]
    stale = [str(p.relative_to(ROOT)) for p in texts if "results_dir>/.locks" in p.read_text()]
    assert not stale, f"a lock folder under results_dir is documented in {stale}"
