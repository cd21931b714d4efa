"""The import graph: imports go down the layers only, nothing is circular, and the sweeper process stays torch-free.

Layers (docs/architecture.md's floors): ``sweeper.sweep`` -> ``sweeper.trial`` -> ``workloads``;
``sweeper.sweep`` and ``sweeper.trial`` -> ``sweeper.results``; ``sweeper.report`` -> ``sweeper.results`` only;
``workloads`` imports nothing from ``sweeper``; ``workloads.spec`` (the knob classes the sweeper reads) only
``workloads.base``. Inside the sweep, the flow of a command: ``cli``, ``plan`` and ``loop`` -> ``run`` ->
``search`` -> ``study`` -> ``config``. Read from the source with ``ast``: every import counts, also one inside a
function (a lazy import is still a dependency), and a forbidden third-party package is one reached through any
chain of first-party imports. A rule broken here names the importing module, its line and the import (or the chain).
What a process really loads is checked in a fresh interpreter: importing the sweeper's, the report's and the
plugin's modules leaves torch out of ``sys.modules``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sweeper", "workloads", "hydra_plugins")

# what every floor of the sweep may import below it
BELOW_THE_SWEEP = {
    "sweeper.trial",
    "sweeper.results",
    "sweeper.errors",
    "workloads",
    "workloads.base",
    "workloads.spec",
}
SWEEP_FLOORS = {"sweeper.sweep.config", "sweeper.sweep.study", "sweeper.sweep.search", "sweeper.sweep.run"}
# layer -> the layers it may import (its own always allowed). A module's layer is the longest prefix listed here.
ALLOWED: dict[str, set[str]] = {
    "sweeper.errors": set(),
    "sweeper.results": set(),
    "sweeper.report": {"sweeper.results"},
    "sweeper.trial": {"sweeper.results", "sweeper.errors", "workloads", "workloads.base", "workloads.spec"},
    # the sweep's floors, each on the layers below the sweep and the floors below it: what the user wrote (config),
    # the Optuna study (study), what to try next (search), running trials (run), and on top cli, plan and loop
    "sweeper.sweep.config": BELOW_THE_SWEEP,
    "sweeper.sweep.study": {*BELOW_THE_SWEEP, "sweeper.sweep.config"},
    "sweeper.sweep.search": {*BELOW_THE_SWEEP, "sweeper.sweep.config", "sweeper.sweep.study"},
    "sweeper.sweep.run": {*BELOW_THE_SWEEP, "sweeper.sweep.config", "sweeper.sweep.study", "sweeper.sweep.search"},
    "sweeper.sweep": {*BELOW_THE_SWEEP, *SWEEP_FLOORS},
    "workloads": {"workloads.base", "workloads.spec"},
    "workloads.base": set(),
    "workloads.spec": {"workloads.base"},  # the knob classes and checks: what the sweeper process reads
    "sweeper": {"sweeper.errors", "sweeper.results"},  # the package root re-exports the public names
    "sweeper.__main__": {"sweeper", "sweeper.errors", "sweeper.sweep", *SWEEP_FLOORS, "hydra_plugins"},
    # (the CLI entry point; it registers the plugin class itself: an editable install's finder cannot be listed by
    # Hydra's discovery)
    "hydra_plugins": {"sweeper.sweep", *SWEEP_FLOORS},  # the thin plugin class (its settings), lazy import of the loop
}
# third-party packages a layer must not reach through any chain of imports, lazy ones included (the report and
# every reader of rows stay free of them; the knob classes stay free of torch so the sweeper can read them)
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "sweeper.results": {"optuna", "torch", "torchvision", "hydra"},
    "sweeper.report": {"torch", "torchvision", "hydra"},
    "workloads": {"optuna", "hydra"},
    "workloads.base": {"optuna", "hydra", "torch", "torchvision"},
    "workloads.spec": {"optuna", "hydra", "torch", "torchvision"},
}
# Modules the sweeper process, the report process and Hydra's plugin discovery import: in a fresh interpreter,
# none of them may load torch (the sweeper never touches CUDA; the report runs where torch is not installed).
TORCH_FREE = (
    "sweeper.sweep.loop",
    "sweeper.report",
    "sweeper.report.__main__",
    "sweeper.results",
    "hydra_plugins.knob_sweeper.knob_sweeper",
    "workloads.spec.resnet50",
    "workloads.spec.matmul",
    "workloads.spec.transformer_block",
)


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every first-party module: dotted name -> file."""
    found = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            found[module_name(path, root)] = path
    return found


def imports(path: Path, name: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file; ``from a import b`` is ``a.b`` when that is a module."""
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, base] if base else pkg)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((node.lineno, sub if sub in known else base))
    return out


def layer_of(name: str) -> str | None:
    best = None
    for layer in ALLOWED:
        if (name == layer or name.startswith(layer + ".")) and (best is None or len(layer) > len(best)):
            best = layer
    return best


def graph(root: Path = ROOT) -> tuple[dict[str, list[tuple[int, str]]], dict[str, Path]]:
    """First-party module -> [(line, first-party or third-party module it imports)]."""
    mods = modules(root)
    known = set(mods)
    return {name: imports(path, name, known) for name, path in mods.items()}, mods


def violations(root: Path = ROOT) -> list[str]:
    edges, mods = graph(root)
    out = []
    for name, targets in edges.items():
        layer = layer_of(name)
        for line, target in targets:
            top = target.split(".")[0]
            where = f"{mods[name].relative_to(root)}:{line}: {name} imports {target}"
            if top in PACKAGES:
                to = layer_of(target)
                if to is None:
                    out.append(f"{where} (a module outside the layers)")
                elif to != layer and to not in ALLOWED[layer]:
                    out.append(f"{where} ({layer} may import only {sorted(ALLOWED[layer]) or 'itself'})")
    return out + reached_third_party(edges, mods, root)


def reached_third_party(edges: dict[str, list[tuple[int, str]]], mods: dict[str, Path], root: Path) -> list[str]:
    """A forbidden third-party package reached from a module of a layer through first-party imports, with the
    chain that reaches it (breadth first: the shortest one)."""
    out = []
    for name in sorted(edges):
        forbidden = FORBIDDEN_THIRD_PARTY.get(layer_of(name) or "", set())
        if not forbidden:
            continue
        chain = {name: [name]}
        queue = [name]
        found: dict[str, list[str]] = {}
        while queue:
            here = queue.pop(0)
            for line, target in edges[here]:
                top = target.split(".")[0]
                if top in forbidden and top not in found:
                    found[top] = [*chain[here], f"{target} (line {line})"]
                elif target in edges and target not in chain:
                    chain[target] = [*chain[here], target]
                    queue.append(target)
        out += [
            f"{mods[name].relative_to(root)}: {name} reaches {top}: {' -> '.join(path)}"
            for top, path in sorted(found.items())
        ]
    return out


def cycles(root: Path = ROOT) -> list[list[str]]:
    """Strongly connected components of more than one module (or a module importing itself)."""
    edges, mods = graph(root)
    adj = {n: sorted({t for _, t in ts if t in mods and t != n}) for n, ts in edges.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan; the graph has under 100 nodes, recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(adj):
        if v not in index:
            visit(v)
    return found


def test_every_module_is_in_a_layer() -> None:
    assert {n for n in modules() if layer_of(n) is None} == set()


def test_imports_go_down_the_layers_only() -> None:
    assert violations() == []


def test_no_import_cycles() -> None:
    assert cycles() == []


def test_every_package_says_which_process_runs_it() -> None:
    for pkg in ("sweeper.sweep", "sweeper.trial", "sweeper.results", "sweeper.report", "workloads"):
        path = ROOT / pkg.replace(".", "/") / "__init__.py"
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        assert "process" in doc.lower(), f"{path}: the docstring must say which process runs this package"


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("workloads/extra.py", "from sweeper.results import store\n", "workloads may import only"),
        (
            "sweeper/report/extra.py",
            "def f():\n    from sweeper.sweep import study\n",
            "sweeper.report may import only",
        ),
        ("sweeper/results/extra.py", "import optuna\n", "sweeper.results.extra reaches optuna"),
        ("workloads/spec/extra.py", "from workloads import data\n", "workloads.spec may import only"),
        ("sweeper/trial/extra.py", "from sweeper.sweep.config.space import flatten\n", "sweeper.trial may import only"),
        (
            "sweeper/sweep/config/extra.py",
            "from sweeper.sweep.study import trials\n",
            "sweeper.sweep.config may import",
        ),
        (
            "sweeper/sweep/search/extra.py",
            "def f():\n    from sweeper.sweep.run import slots\n",
            "sweeper.sweep.search may",
        ),
        ("sweeper/sweep/run/extra.py", "from sweeper.sweep import plan\n", "sweeper.sweep.run may import only"),
    ],
)
def test_a_forbidden_import_is_caught(tmp_path: Path, module: str, source: str, expected: str) -> None:
    """The checks above fail for a forbidden import (checked on a copy of the tree with one module added)."""
    copy = _copy_tree(tmp_path)
    (copy / module).write_text(source, encoding="utf-8")
    found = new_violations(copy)
    assert any(expected in v for v in found), found
    assert all(v.startswith(module) for v in found), found  # (and the chains it opens: to torch, say)


def test_a_forbidden_package_reached_through_a_chain_is_caught(tmp_path: Path) -> None:
    """A report module importing an allowed row helper that imports torch lazily: the direct import is fine, the
    chain is not, and the message shows the chain."""
    copy = _copy_tree(tmp_path)
    (copy / "sweeper/results/extra.py").write_text("def f():\n    import torch\n", encoding="utf-8")
    (copy / "sweeper/report/extra.py").write_text("from sweeper.results import extra\n", encoding="utf-8")
    found = new_violations(copy)
    assert (
        "sweeper/report/extra.py: sweeper.report.extra reaches torch: "
        "sweeper.report.extra -> sweeper.results.extra -> torch (line 2)"
    ) in found, found
    assert len(found) == 2, found  # and sweeper.results.extra itself


def loaded_after_import(module: str, names: tuple[str, ...] = ("torch", "torchvision")) -> list[str]:
    """Which of ``names`` a fresh interpreter holds in ``sys.modules`` after ``import module``."""
    probe = f"import sys, {module}; print(','.join(n for n in {names!r} if n in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return [n for n in done.stdout.strip().split(",") if n]


@pytest.mark.parametrize("module", TORCH_FREE)
def test_the_sweeper_report_and_plugin_import_no_torch(module: str) -> None:
    assert loaded_after_import(module) == []


def test_the_torch_probe_sees_torch_when_it_is_imported() -> None:
    """The probe above can fail: a workload's own module (the trial's side) does load torch."""
    assert loaded_after_import("workloads.resnet50") == ["torch", "torchvision"]


def test_checking_a_built_in_workload_before_launch_imports_no_torch() -> None:
    """What the sweeper does before launch with a built-in workload (its knob values checked, its ``check`` run on
    the device) reads the torch-free spec module: torch stays out of the process."""
    probe = (
        "import sys\n"
        "from sweeper.sweep.config.trial_config import check_enumerations, load_workload\n"
        "from workloads.base import DeviceInfo\n"
        "check_enumerations({'knobs.precision': ['fp32', 'bf16'], 'knobs.batch_size': 64}, 'resnet50')\n"
        "cfg = {'workload': {'name': 'resnet50', 'data': 'jpeg'}, 'device': 'cpu', 'distributed': {},\n"
        "       'knobs': {'precision': 'bf16', 'compile': 'off', 'decode_device': 'cuda'}}\n"
        "print(load_workload(cfg['workload']).check(cfg, DeviceInfo(kind='cpu')))\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    reason, torch_loaded = done.stdout.strip().splitlines()
    assert "decode_device=cuda decodes JPEGs on a GPU" in reason
    assert torch_loaded == "False"


def test_a_sweep_keeps_its_own_process_free_of_torch(tmp_path: Path) -> None:
    """A whole sweep (trials measured, re-measured and profiled, rows written, study compacted) in one interpreter:
    what the trial processes send back (their results, with torch's version among them) is unpickled without
    importing torch into the sweeper."""
    args = [
        "hydra.searchpath=[file://tests/faultload/conf]",
        "+workload=faults",
        "-m",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.params={knobs.fault:none,knobs.work:'choice(8,16)'}",
        "hydra.sweeper.profile=1",
        "hydra.sweeper.confirm_unstable=false",  # the runner-up's noisy CPU steps would add a repeat, at times
        f"results_dir={tmp_path / 'results'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
    ]
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['sweeper', *{args!r}]\n"
        "try:\n"
        "    runpy.run_module('sweeper', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print('TORCH', 'torch' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    # 2 searched, the best again (profiled); no baseline: the default knobs.work=32 is outside the space
    assert "sweep done: 3 complete" in done.stderr, done.stderr[-3000:]
    assert "TORCH False" in done.stderr, "a trial's result imported torch into the sweeper"
    from sweeper.results.read import read_rows

    rows = read_rows(tmp_path / "results")
    assert rows["prof_trace"].notna().any(), "the profiled re-measurement ran"
    assert isinstance(rows["torch_version"].iloc[0], str) and rows["torch_version"].iloc[0][0].isdigit()


def test_a_cycle_is_caught(tmp_path: Path) -> None:
    copy = _copy_tree(tmp_path)
    (copy / "sweeper/results/a.py").write_text("from sweeper.results import b\n", encoding="utf-8")
    (copy / "sweeper/results/b.py").write_text("def f():\n    import sweeper.results.a\n", encoding="utf-8")
    assert ["sweeper.results.a", "sweeper.results.b"] in cycles(copy)


def new_violations(copy: Path) -> list[str]:
    """The violations of a modified copy of the tree that the tree itself does not have."""
    before = set(violations())
    return [v for v in violations(copy) if v not in before]


def _copy_tree(tmp_path: Path) -> Path:
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            dest = tmp_path / path.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path
