"""Docs that name code name code that exists, and the module map names every module.

Read without importing the project: a dotted name is resolved by file (``a.b.c`` is ``a/b/c.py`` or
``a/b/c/__init__.py``) and its attributes by ``ast`` (a top-level def, class, assignment or import, followed
through re-exports; then a class's method, attribute or ``self.`` attribute), so the check takes well under a second
and never loads torch. Checked in README.md and every docs/**/*.md, inside code spans and fenced blocks:

* a dotted name that starts with a project package (``sweeper.``, ``workloads.``, ``hydra_plugins.``) resolves;
* a short ``module.name`` (``recovery.requeue_interrupted``) resolves in a module of that name, unless its first
  word is a config group (``trial.timeout_s``) or its last a file type (``report.html``);
* a path that starts with a project folder (``sweeper/``, ``tests/``, ``conf/``, ...; in a fenced block only the
  packages' folders) exists, one under ``sweeper/`` may leave out ``sweeper/`` (``sweep/loop.py``), a bare
  ``name.py`` is some tracked file's name, and in ``path.py: name`` (or a test's ``path.py::name``) the name is
  defined in that file; a ``test_...`` name is a test file's or a test's;
* a key of a typed config group (``hydra.sweeper.timeout_s``, ``measure.steps``, ``trial.*``, ``distributed.*``)
  is a field of its schema dataclass;
* docs/architecture.md's module map (the fenced block under "## Modules") names every module file of
  ``sweeper/``, ``workloads/`` and ``hydra_plugins/``, and every file it names exists.

And in the packages' own source (docstrings, comments, messages), every backticked dotted name of a project package
resolves.
"""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = ("sweeper", "workloads", "hydra_plugins")
FOLDERS = (*PACKAGES, "conf", "tests", "docs", "bench", "examples", ".ci")  # the repository's, results/ aside
# A name or path starts where no word, dot, slash or dash precedes it (``hydra.sweeper.x`` is a config key).
DOTTED = re.compile(r"(?<![\w./-])((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)+)")
SHORT = re.compile(r"(?<![\w./-])([a-z_]\w*)((?:\.[A-Za-z_]\w*)+)")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(f) for f in FOLDERS) + r")/[\w./*-]*)")
PACKAGE_PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(PACKAGES) + r")/[\w./-]*)")
RELATIVE_PY = re.compile(r"(?<![\w./<>-])((\w+)/(?:\w+/)*\w+\.py)\b")
BARE_PY = re.compile(r"(?<![\w./<>-])(\w+\.py)\b")
DEFINED_IN = re.compile(r"^\s*([\w./-]+\.py)(::|:\s*)([A-Za-z_]\w*)")  # path.py: name, a test's node id
TEST_NAME = re.compile(r"(?<![\w./:-])(test_\w+)\b")
FENCE = re.compile(r"^\s*(```|~~~)")
SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
DOC_SPAN = re.compile(r"``(.+?)``|`([^`]+)`")
ROLE = re.compile(r":(?:meth|class|func|attr|mod|data|obj|exc|const):`~?\.?([\w.]+)`")  # Sphinx cross-references
# A short name ending in one of these is a file (``report.html``, ``sweep.log``), not a module's attribute.
FILE_TYPES = {"py", "md", "html", "json", "jsonl", "log", "sh", "parquet", "yaml", "yml", "txt", "csv", "toml"}
# Config groups -> (file, dataclass) of their typed schema: a documented ``measure.steps`` is one of its fields.
SCHEMAS = {
    "hydra.sweeper": ("sweeper/sweep/config/settings.py", "KnobSweeperConf"),
    "measure": ("sweeper/trial/conf.py", "MeasureConf"),
    "trial": ("sweeper/trial/conf.py", "TrialConf"),
    "distributed": ("workloads/spec/distributed.py", "DistributedConf"),
}
CONFIG_KEY = re.compile(r"(?<![\w./-])(" + "|".join(re.escape(g) for g in SCHEMAS) + r")\.([a-z_]\w*)")
# Data folders installed as packages (pyproject's package-dir): a dotted name may point into them.
DATA_PACKAGES = {"sweeper.conf": "conf"}


def docs(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def code_of(text: str) -> list[tuple[int, str, bool]]:
    """(line number, code, whether in a fenced block) for every line of a fenced block and every code span (one
    that goes on over a line break counts from its first line, the break read as a space)."""
    fenced_lines = []
    prose = []
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            prose.append("")
        elif fenced:
            fenced_lines.append((number, line, True))
            prose.append("")
        else:
            prose.append(line)
    joined = "\n".join(prose)
    spans = [
        (joined.count("\n", 0, m.start()) + 1, m.group(2).replace("\n", " "), False)
        for m in SPAN.finditer(joined)
        if "\n\n" not in m.group(2)
    ]
    return sorted(fenced_lines + spans, key=lambda item: item[0])


def module_file(parts: list[str], root: Path) -> Path | None:
    base = root.joinpath(*parts)
    for candidate in (base.with_name(base.name + ".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a body, those under ``if``/``try``/``with`` included (``if TYPE_CHECKING:``, a guarded
    import)."""
    out = []
    for node in body:
        out.append(node)
        if isinstance(node, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody"):
                out += _statements(getattr(node, field, []))
            for handler in getattr(node, "handlers", []):
                out += _statements(handler.body)
    return out


def _targets(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return []
    return [sub.id for target in targets for sub in ast.walk(target) if isinstance(sub, ast.Name)]


def module_names(path: Path) -> dict[str, ast.AST]:
    """A module's top-level names: defs, classes, assignments and imports (the import's node)."""
    names: dict[str, ast.AST] = {}
    for node in _statements(_tree(path).body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        else:
            names.update(dict.fromkeys(_targets(node), node))
    return names


def class_names(cls: ast.ClassDef) -> set[str]:
    """A class's methods, class attributes (fields, enum members) and ``self.x`` attributes set in its methods."""
    names = set()
    for node in _statements(cls.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                continue
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.ctx, ast.Store)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                ):
                    names.add(sub.attr)
        else:
            names.update(_targets(node))
    return names


def _lazy_exports(path: Path) -> dict[str, str]:
    """A package's lazily imported public names: a top-level dict literal ``{name: module}`` that its module
    ``__getattr__`` reads."""
    names = module_names(path)
    if "__getattr__" not in names:
        return {}
    out = {}
    for node in names.values():
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant) and isinstance(value.value, str):
                    out[str(key.value)] = value.value
    return out


def resolve(name: str, root: Path = ROOT) -> str | None:
    """None when the dotted name is a module or an attribute defined where the name says; else why not."""
    parts = name.split(".")
    for prefix, folder in DATA_PACKAGES.items():
        if name == prefix or name.startswith(prefix + "."):
            target = root.joinpath(folder, *parts[len(prefix.split(".")) :])
            return None if target.exists() or target.with_suffix(".yaml").exists() else "no such config file"
    for cut in range(len(parts), 0, -1):
        path = module_file(parts[:cut], root)
        if path is not None:
            return _resolve_in(path, ".".join(parts[:cut]), parts[cut:], root)
    return "no such module"


def _resolve_in(path: Path, module: str, rest: list[str], root: Path) -> str | None:
    if not rest:
        return None
    attr, more = rest[0], rest[1:]
    node = module_names(path).get(attr)
    if node is None:
        lazy = _lazy_exports(path).get(attr)
        if lazy is not None:
            target = module_file(lazy.split("."), root)
            if target is None:
                return f"{module}.{attr} is exported from {lazy}, which does not exist"
            return _resolve_in(target, lazy, rest, root)
        return f"{module} has no {attr}"
    if isinstance(node, ast.ImportFrom):
        return _follow_import(node, path, module, attr, more, root)
    if more and isinstance(node, ast.ClassDef) and more[0] not in class_names(node):
        return f"{module}.{attr} has no {more[0]}"
    return None  # deeper than a class's member, or an attribute of a function's or a value's: not followed


def _follow_import(node: ast.ImportFrom, path: Path, module: str, attr: str, more: list[str], root: Path) -> str | None:
    base = node.module or ""
    if node.level:
        pkg = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, base] if base else pkg)
    if base.split(".")[0] not in PACKAGES:
        return None  # a third-party name imported: not ours to check
    original = next((a.name for a in node.names if (a.asname or a.name) == attr), attr)
    sub = module_file([*base.split("."), original], root)
    if sub is not None:
        return _resolve_in(sub, f"{base}.{original}", more, root)
    source = module_file(base.split("."), root)
    if source is None:
        return f"{module} imports {attr} from {base}, which does not exist"
    return _resolve_in(source, base, [original, *more], root)


def module_files(root: Path = ROOT) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


@functools.lru_cache(maxsize=None)
def modules_by_name(root: Path) -> dict[str, list[str]]:
    """A module's last name (``recovery``, ``study`` for a package) -> the dotted names of those so named."""
    out: dict[str, list[str]] = {}
    for file in module_files(root):
        parts = list(Path(file).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.setdefault(parts[-1], []).append(".".join(parts))
    return out


@functools.lru_cache(maxsize=None)
def config_groups(root: Path) -> set[str]:
    """The top-level keys of the configs (``trial``, ``measure``, ``knobs``, ...): ``trial.timeout_s`` is a key."""
    keys = {group.split(".")[0] for group in SCHEMAS}  # typed nodes: composed from their dataclasses, not YAML
    for path in (root / "conf").rglob("*.yaml"):
        keys.update(re.findall(r"^([A-Za-z_]\w*):", path.read_text(encoding="utf-8"), re.MULTILINE))
    return keys


@functools.lru_cache(maxsize=None)
def schema_fields(root: Path, group: str) -> set[str] | None:
    """The fields of a config group's schema dataclass (its annotated class attributes); None without its file."""
    file, cls = SCHEMAS[group]
    if not (root / file).is_file():
        return None
    for node in ast.walk(_tree(root / file)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    return set()


@functools.lru_cache(maxsize=None)
def names_of_tests(root: Path) -> set[str]:
    """The test files' names (``test_nightly``) and the test functions' (``test_a_cycle_is_caught``)."""
    names = set()
    for path in (root / "tests").rglob("test_*.py"):
        names.add(path.stem)
        names.update(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.MULTILINE))
    return names


@functools.lru_cache(maxsize=None)
def tracked_names(root: Path) -> set[str]:
    """The file names the repository holds (``git ls-files`` and the modules not yet added; without git, the files on
    disk)."""
    if (root / ".git").exists():
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True).stdout
        return {Path(n).name for n in out.split("\0") if n} | {Path(f).name for f in module_files(root)}
    return {p.name for p in root.rglob("*") if ".venv" not in p.parts}


def _short_name(head: str, rest: str, by_name: dict[str, list[str]], root: Path) -> str | None:
    whys = [resolve(f"{module}.{rest}", root) for module in by_name[head]]
    return None if any(w is None for w in whys) else "; ".join(w for w in whys if w)


def broken_names(md: Path, root: Path = ROOT) -> list[str]:
    """``doc:line: name (why)`` for each name or path in the doc's code that does not resolve."""
    where = md.relative_to(root).as_posix()
    by_name, groups, files = modules_by_name(root), config_groups(root), tracked_names(root)
    out = []
    for number, code, fenced in code_of(md.read_text(encoding="utf-8")):
        found: list[tuple[str, str | None]] = [(name, resolve(name, root)) for name in DOTTED.findall(code)]
        for m in SHORT.finditer(code):
            head, rest = m.group(1), m.group(2)[1:]
            if head in by_name and head not in PACKAGES and head not in groups:
                if rest.split(".")[-1] not in FILE_TYPES:
                    found.append((f"{head}.{rest}", _short_name(head, rest, by_name, root)))
        for raw in (PACKAGE_PATH if fenced else PATH).findall(code):
            path = raw.rstrip(".,:;")
            there = any(root.glob(path)) if "*" in path else (root / path).exists()
            found.append((path, None if there else "no such file"))
        for path, first in RELATIVE_PY.findall(code):
            if first not in FOLDERS and (root / "sweeper" / first).is_dir():
                found.append((path, None if (root / "sweeper" / path).exists() else "no such file under sweeper/"))
        for name in BARE_PY.findall(code):
            found.append((name, None if name in files else "no such file"))
        for group, key in CONFIG_KEY.findall(code):
            fields = schema_fields(root, group)
            if key not in FILE_TYPES and fields is not None and key not in fields:
                found.append((f"{group}.{key}", f"not a field of {SCHEMAS[group][1]}"))
        for name in TEST_NAME.findall(code):
            found.append((name, None if name in names_of_tests(root) else "no such test"))
        defined = DEFINED_IN.match(code)
        if defined and (root / defined.group(1)).is_file():
            file, sep, attr = defined.groups()
            if attr not in module_names(root / file):
                found.append((f"{file}{sep}{attr}", "not defined there"))
        out += [f"{where}:{number}: {name} ({why})" for name, why in found if why]
    return out


def _role_target(name: str, file: str, root: Path) -> str | None:
    """Why a Sphinx role's target (``:meth:`StopPolicy.check``` in ``file``) is not there, or None. A name is
    looked up as Sphinx does: a project package's from the root, else in the module, else among its classes'
    members (``:meth:`check``` inside a class)."""
    if name.split(".")[0] in PACKAGES:
        return resolve(name, root)
    parts = list(Path(file).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    path = root / file
    if name.split(".")[0] in module_names(path):
        return _resolve_in(path, ".".join(parts), name.split("."), root)
    classes = [n for n in ast.walk(_tree(path)) if isinstance(n, ast.ClassDef)]
    if "." not in name and any(name in class_names(c) for c in classes):
        return None
    return f"{'.'.join(parts)} has no {name}"


def broken_names_in_code(root: Path = ROOT) -> list[str]:
    """``file:line: name (why)`` for each backticked project name in the packages' source (docstrings, comments,
    messages) and each Sphinx role's target (``:meth:`...```) that does not resolve. Line by line: a span does not
    cross a line."""
    out = []
    for file in module_files(root):
        for number, line in enumerate((root / file).read_text(encoding="utf-8").splitlines(), 1):
            if "`" not in line:
                continue
            found = []
            for m in ROLE.finditer(line):
                found.append((m.group(1), _role_target(m.group(1), file, root)))
            for m in DOC_SPAN.finditer(ROLE.sub("", line)):
                found += [(name, resolve(name, root)) for name in DOTTED.findall(m.group(1) or m.group(2))]
            out += [f"{file}:{number}: {name} ({why})" for name, why in found if why]
    return out


def module_map(md: Path) -> tuple[dict[str, int], list[str]]:
    """The files docs/architecture.md's module map names (path -> line), and its lines that cannot be placed.

    The map is the fenced block under the heading "## Modules": a first word ending in ``/`` is a folder, one
    ending in ``.py`` a module, each inside the nearest folder above it that is indented less (at the left margin:
    a path from the repository's root). Other lines (a description carried over) name nothing."""
    lines = md.read_text(encoding="utf-8").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "## Modules"), None)
    if start is None:
        return {}, [f"{md.name}: no '## Modules' section"]
    named: dict[str, int] = {}
    problems: list[str] = []
    open_folders: list[tuple[int, str]] = []  # (indent, folder path)
    fenced = False
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if FENCE.match(line):
            if fenced:
                break
            fenced = True
            continue
        if not fenced or not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        word = line.split()[0]
        if not (word.endswith("/") or word.endswith(".py")):
            continue
        while open_folders and open_folders[-1][0] >= indent:
            open_folders.pop()
        parent = open_folders[-1][1] if open_folders else ""
        if indent and not open_folders:
            problems.append(f"{md.name}:{i + 1}: {word} (indented, but under no folder)")
            continue
        path = parent + word
        if word.endswith("/"):
            open_folders.append((indent, path))
            path += "__init__.py"
        named[path] = i + 1
    return named, problems


def map_problems(root: Path = ROOT) -> list[str]:
    md = root / "docs" / "architecture.md"
    named, problems = module_map(md)
    files = module_files(root)
    problems += [f"{f} (not in the module map of docs/architecture.md)" for f in files if f not in named]
    problems += [
        f"docs/architecture.md:{line}: {path} (no such file)"
        for path, line in named.items()
        if not (root / path).is_file() and not (path.endswith("/__init__.py") and (root / path).parent.is_dir())
    ]
    return problems


def test_every_name_the_docs_give_resolves() -> None:
    broken = [b for md in docs() for b in broken_names(md)]
    assert not broken, "names in the docs that the code does not have:\n" + "\n".join(broken)


def test_every_name_the_docstrings_give_resolves() -> None:
    broken = broken_names_in_code()
    assert not broken, "names in docstrings, comments and messages that the code does not have:\n" + "\n".join(broken)


def test_the_module_map_names_every_module() -> None:
    problems = map_problems()
    assert not problems, "\n".join(problems)


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A small tree: a package with a module, a class, a lazily exported name, a re-export and a config."""
    pkg = tmp_path / "sweeper"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        '_PUBLIC = {"Thing": "sweeper.sub.mod"}\n\n\ndef __getattr__(name):\n    pass\n', encoding="utf-8"
    )
    (pkg / "sub" / "__init__.py").write_text("from sweeper.sub.mod import Thing as Alias\n", encoding="utf-8")
    (pkg / "sub" / "mod.py").write_text(
        '"""The module; see ``sweeper.sub.mod.helper`` and ``sweeper.sub.gone``."""\n\n'
        "LIMIT: int = 3  # unlike `sweeper.sub.mod.LIMITS`\n\n\n"
        "class Thing:\n    KIND = 'a'\n\n    def __init__(self):\n        self.size = 1\n\n"
        '    def go(self):\n        """Unlike :meth:`size`, :meth:`Thing.stop`, '
        ':class:`~sweeper.sub.mod.Thing`, :func:`gone`."""\n'
        "\n\ndef helper():\n    pass\n",
        encoding="utf-8",
    )
    (tmp_path / "workloads").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_here():\n    pass\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "conf").mkdir()
    (pkg / "trial").mkdir()
    (pkg / "trial" / "conf.py").write_text("class TrialConf:\n    timeout_s: float = 1.0\n", encoding="utf-8")
    (tmp_path / "conf" / "config.yaml").write_text("mod:\n  size: 1\n", encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("sweeper.sub.mod", None),
        ("sweeper.sub.mod.helper", None),
        ("sweeper.sub.mod.LIMIT", None),
        ("sweeper.sub.mod.Thing.go", None),
        ("sweeper.sub.mod.Thing.KIND", None),
        ("sweeper.sub.mod.Thing.size", None),
        ("sweeper.sub.Alias.go", None),
        ("sweeper.Thing.go", None),
        ("sweeper.sub.mod.Thing.stop", "sweeper.sub.mod.Thing has no stop"),
        ("sweeper.sub.mod.gone", "sweeper.sub.mod has no gone"),
        ("sweeper.sub.Alias.stop", "sweeper.sub.mod.Thing has no stop"),
        ("sweeper.other", "sweeper has no other"),
        ("workloads.x", "no such module"),
    ],
)
def test_a_name_resolves_by_file_and_ast(planted: Path, name: str, why: str | None) -> None:
    assert resolve(name, planted) == why


def test_the_checks_report_each_wrong_name_with_its_line(planted: Path) -> None:
    """Wrong names in code spans and fenced blocks are found with their line; a config key that merely contains a
    package's or a module's name, a file type, prose and right names are not."""
    doc = planted / "docs" / "guide.md"
    doc.write_text(
        "# Guide\n"
        "`sweeper.sub.mod.Thing.go`, `hydra.sweeper.timeout_s`, `mod.size`, `sub.html`, sweeper.nothing in prose\n"
        "The policy's `sweeper.sub.mod.Thing.check` and `sweeper/sub/gone.py` and `sweeper/sub/mod.py: helper`\n"
        "```\n"
        "python -m sweeper.sub.mod; sweeper.sub.missing(); other/conf/x.yaml\n"
        "```\n"
        "`sweeper/sub/mod.py: later`, `sub.Alias.go`, `sub.Alias.check`, `sub/mod.py`, `sub/old.py`, `old.py`\n"
        "`sweeper/sub/m*.py` and `sweeper/sub/x*`, then `sweeper.sub.mod.Thing.go(a,\nb)` and `sweeper.sub.mod.run(a,\n"
        "b)` -> `sweeper.sub.mod.LIMIT`\n"
        "`tests/test_x.py::test_gone`, `tests/test_x.py::test_here`, `test_x`, `test_here`, `test_old_name`\n"
        "`trial.timeout_s=5`, `trial.timeouts`\n",
        encoding="utf-8",
    )
    assert broken_names(doc, planted) == [
        "docs/guide.md:3: sweeper.sub.mod.Thing.check (sweeper.sub.mod.Thing has no check)",
        "docs/guide.md:3: sweeper/sub/gone.py (no such file)",
        "docs/guide.md:5: sweeper.sub.missing (sweeper.sub has no missing)",
        "docs/guide.md:7: sweeper/sub/mod.py: later (not defined there)",
        "docs/guide.md:7: sub.Alias.check (sweeper.sub.mod.Thing has no check)",
        "docs/guide.md:7: sub/old.py (no such file under sweeper/)",
        "docs/guide.md:7: old.py (no such file)",
        "docs/guide.md:8: sweeper/sub/x* (no such file)",
        "docs/guide.md:9: sweeper.sub.mod.run (sweeper.sub.mod has no run)",
        "docs/guide.md:11: tests/test_x.py::test_gone (not defined there)",
        "docs/guide.md:11: test_old_name (no such test)",
        "docs/guide.md:12: trial.timeouts (not a field of TrialConf)",
    ]


def test_the_docstring_check_finds_a_wrong_name_with_its_line(planted: Path) -> None:
    assert broken_names_in_code(planted) == [
        "sweeper/sub/mod.py:1: sweeper.sub.gone (sweeper.sub has no gone)",
        "sweeper/sub/mod.py:3: sweeper.sub.mod.LIMITS (sweeper.sub.mod has no LIMITS)",
        "sweeper/sub/mod.py:13: Thing.stop (sweeper.sub.mod.Thing has no stop)",
        "sweeper/sub/mod.py:13: gone (sweeper.sub.mod has no gone)",
    ]


def test_the_map_check_finds_a_missing_and_a_stale_module(planted: Path) -> None:
    (planted / "docs" / "architecture.md").write_text(
        "# Architecture\n\n## Modules\n\n```\n"
        "sweeper/        the package\n"
        "    sub/        a sub-package\n"
        "        gone.py     was removed\n"
        "                    (a description carried over)\n"
        "    x.py          not there either\n"
        "```\n",
        encoding="utf-8",
    )
    assert map_problems(planted) == [
        "sweeper/sub/mod.py (not in the module map of docs/architecture.md)",
        "sweeper/trial/conf.py (not in the module map of docs/architecture.md)",
        "docs/architecture.md:8: sweeper/sub/gone.py (no such file)",
        "docs/architecture.md:10: sweeper/x.py (no such file)",
    ]
