"""Reasons are typed and attributes named once: no string grammar is parsed, no attribute name is spelled twice.

* every ``Reason`` round-trips through its text; an unknown tag is ``Reason.NONE``;
* the reasons the producers write (the Parquet ``reason`` column, the trials' ``reason`` attribute) are the texts
  they always were;
* no module of ``sweeper/`` decides on a reason with ``startswith``, nor spells an Optuna attribute's name in a
  read or a write of it: the names live in ``sweeper.sweep.study.attrs`` (each refused as a workload's metric:
  ``tests/test_hostile_values.py``).
"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import optuna
import pytest

from sweeper.results.outcome import Reason, Status, TrialOutcome
from sweeper.sweep.search import dedup
from sweeper.sweep.study import attrs
from sweeper.sweep.study import trials as studies

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "sweeper").rglob("*.py")) + sorted((ROOT / "hydra_plugins").rglob("*.py"))

# ------------------------------------------------------------------------------------------------ the typed reason


@pytest.mark.parametrize("member", list(Reason))
def test_every_reason_round_trips_through_its_text(member: Reason) -> None:
    assert Reason.of(member.tag("x")) is member
    assert Reason.of(member.tag()) is member
    assert TrialOutcome(Status.FAILED, member.tag("a:b")).kind is member
    if member is not Reason.NONE:
        assert TrialOutcome(Status.FAILED, member.tag("a:b")).detail == "a:b"


@pytest.mark.parametrize("text", ["bogus", "bogus:1", "OOM", " oom", None, "", 3])
def test_an_unknown_tag_is_none(text: object) -> None:
    assert Reason.of(text) is Reason.NONE


def test_the_producers_write_the_reason_texts_they_always_did(tmp_path: Path) -> None:
    """The Parquet ``reason`` column is read by every earlier result: its text is unchanged, byte for byte."""
    from hydra.core.utils import JobReturn, JobStatus

    from sweeper.sweep.run import launch
    from sweeper.sweep.run.job import CheckFailed
    from sweeper.trial.child import PruneRequested, classify
    from sweeper.trial.measure import NonFiniteLoss

    objectives = [("throughput", "maximize")]
    produced = {
        "oom": classify(MemoryError("no memory")).reason,
        "nonfinite": classify(NonFiniteLoss("loss is nan", {})).reason,
        "pruned": classify(PruneRequested(3, 1.0)).reason,
        "exception:ValueError": classify(ValueError("bad")).reason,
        "launcher:RuntimeError": launch.outcome_of(RuntimeError("lost")).reason,
        "exception:KeyError": launch.outcome_of(JobReturn(status=JobStatus.FAILED, _return_value=KeyError("k"))).reason,
        "check": CheckFailed("refused").outcome().reason,
        "non-finite:throughput": TrialOutcome(Status.COMPLETE, metrics={"throughput": math.inf})
        .checked(objectives)
        .reason,
        "objective-missing:throughput": TrialOutcome(Status.COMPLETE).checked(objectives).reason,
        "exit:None": Reason.EXIT.tag(str(None)),  # what isolate writes for a child without an exit code
    }
    assert produced == {text: text for text in produced}

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    first = study.ask()
    study.tell(first, 1.0)
    assert dedup.reuse(study.trials[0]).reason == f"duplicate:{first.number}"
    told = study.ask()
    studies.tell(study, told, TrialOutcome(Status.COMPLETE, metrics={}), objectives)
    assert study.trials[-1].user_attrs[attrs.REASON_KEY] == "objective-missing"
    waiting = dedup.Waiting()
    waiting.add(study.ask(), {})
    waiting.give_up(study)
    assert study.trials[-1].user_attrs[attrs.REASON_KEY] == "surplus"
    assert attrs.reason_of(study.trials[-1]) is Reason.SURPLUS


def test_a_pruned_trials_line_names_the_pruner_not_an_interrupt() -> None:
    """The console line used to take a reason equal to its status for an interrupt: a pruned trial's line said
    ``pruned (Ctrl-C, SIGTERM or its sweeper's end)``."""
    from sweeper.sweep.run.progress import SweepProgress

    progress = SweepProgress("s", 4, [("throughput", "maximize")], 0)
    pruned = progress.line(3, TrialOutcome(Status.PRUNED, "pruned", "pruned after 3 measured steps"), {}).plain
    assert "Ctrl-C" not in pruned and "pruner" in pruned, pruned
    interrupted = progress.line(4, TrialOutcome(Status.INTERRUPTED, "interrupted"), {}).plain
    assert "Ctrl-C" in interrupted, interrupted
    duplicate = progress.line(5, TrialOutcome(Status.SKIPPED, "duplicate:12"), {}).plain
    assert "same as trial 12" in duplicate, duplicate


def test_no_reason_is_parsed_with_startswith() -> None:
    """A reason is decided on through ``Reason`` (``outcome.kind``, ``reason_of``), never through its text."""
    tags = "|".join(re.escape(m.value) for m in Reason if m.value)
    parse = re.compile(rf"""startswith\(\s*\(?\s*f?["']({tags})[:"']""")
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in SOURCES
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if parse.search(line) or re.search(r"reason\w*\)?\.(startswith|split|partition)\(", line)
    ]
    assert found == []


# ------------------------------------------------------------------------------------------- the attributes' names

_READS = {"get", "__getitem__", "__contains__"}
_WRITES = {"set_user_attr", "set_system_attr"}  # (name, value)
_STORAGE_WRITES = {"set_trial_user_attr", "set_trial_system_attr", "set_study_user_attr"}  # (id, name, value)
_ATTR_DICTS = {"user_attrs", "system_attrs"}


def _literal_attribute_names(path: Path, root: Path = ROOT) -> list[str]:
    """Where ``path`` spells an Optuna attribute's name as a string literal in a read or a write of it."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            fn, args = node.func, node.args
            if fn.attr in _WRITES and args:
                name = args[0]
            elif fn.attr in _STORAGE_WRITES and len(args) > 1:
                name = args[1]
            elif fn.attr == "get" and isinstance(fn.value, ast.Attribute) and fn.value.attr in _ATTR_DICTS and args:
                name = args[0]
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
            if node.value.attr in _ATTR_DICTS:
                name = node.slice
        elif isinstance(node, ast.Compare) and isinstance(node.comparators[0], ast.Attribute):
            if node.comparators[0].attr in _ATTR_DICTS and isinstance(node.ops[0], (ast.In, ast.NotIn)):
                name = node.left
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            out.append(f"{path.relative_to(root)}:{node.lineno}: {name.value!r}")
        if isinstance(node, ast.Call):  # enqueue_trial(..., user_attrs={"name": ...}), FrozenTrial(system_attrs=...)
            for kw in node.keywords:
                if kw.arg in _ATTR_DICTS and isinstance(kw.value, ast.Dict):
                    for key in kw.value.keys:
                        if isinstance(key, ast.Constant) and isinstance(key.value, str):
                            out.append(f"{path.relative_to(root)}:{node.lineno}: {key.value!r}")
    return out


def test_no_attribute_name_is_spelled_outside_the_one_module() -> None:
    """Every Optuna attribute the sweeper writes or reads is named in ``sweeper.sweep.study.attrs`` (Optuna's own
    system attributes in ``sweeper.sweep.study.optuna_private``) and used through that name."""
    own = {ROOT / "sweeper/sweep/study/attrs.py", ROOT / "sweeper/sweep/study/optuna_private.py"}
    found = [hit for p in SOURCES if p not in own for hit in _literal_attribute_names(p)]
    assert found == []


def test_the_scan_finds_a_literal_attribute_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def f(t, s):\n    t.set_user_attr('status', 1)\n    s.set_trial_system_attr(1, 'x', 2)\n"
        "    s.enqueue_trial({}, user_attrs={'confirm_of': 1})\n"
        "    return t.user_attrs.get('owner'), t.system_attrs['fixed_params'], 'reason' in t.user_attrs\n"
    )
    hits = [h.split(": ", 1)[1] for h in _literal_attribute_names(bad, tmp_path)]
    assert sorted(hits) == sorted(["'status'", "'x'", "'confirm_of'", "'owner'", "'fixed_params'", "'reason'"])


def test_status_and_owner_are_read_as_types(tmp_path: Path) -> None:
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s")
    t = study.ask()
    assert attrs.status_of(study.trials[0]) is None and attrs.reason_of(study.trials[0]) is Reason.NONE
    t.set_user_attr(attrs.STATUS_KEY, Status.INFEASIBLE.value)
    t.set_user_attr(attrs.OWNER_KEY, studies.owner_id())
    assert attrs.status_of(study.trials[0]) is Status.INFEASIBLE
    assert attrs.owner_state(study.trials[0]) is attrs.Owner.SELF
    t.set_user_attr(attrs.OWNER_KEY, "another-host:1")
    t.set_user_attr(attrs.STATUS_KEY, "a status of a later version")
    assert attrs.owner_state(study.trials[0]) is attrs.Owner.UNKNOWN
    assert attrs.status_of(study.trials[0]) is None
