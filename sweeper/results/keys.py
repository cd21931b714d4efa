"""Dotted config keys: the one flatten, set-by-dotted-key and override quoting every layer uses.

A config is a nested mapping; a row's columns, the search space and Hydra's command line name its leaves by
dotted keys (``knobs.dtype``). The sweep, the trial config and the report all go through these helpers, so
they can never disagree about what a key means.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, MutableMapping
from typing import Any


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> {dotted.key: leaf value} (an empty mapping is a leaf)."""
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def set_dotted(cfg: MutableMapping[str, Any], key: str, value: Any) -> None:
    """Set ``cfg[a][b][c] = value`` for ``key`` ``a.b.c``, creating the mappings on the way."""
    *parents, leaf = key.split(".")
    node = cfg
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value


# Text Hydra reads back as the same text when unquoted: a name that no rule of its grammar takes for a bool, null,
# number or function (``true``, ``NULL``, ``inf``, ``NaN`` and ``1e3`` are not text to Hydra; case does not matter).
_PLAIN_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(?:[./:][A-Za-z0-9_-]+)*")
_HYDRA_WORDS = {"true", "false", "null", "inf", "nan"}


def override_value(value: Any, quote_text: bool = False) -> str:
    """``value`` as the value of a Hydra override that parses back to exactly ``value``, of the same type.

    Text is quoted unless it is a plain name (``bf16``, ``channels_last``) and ``quote_text`` is false: ``'inf'``,
    ``'1e3'``, ``'true'``, ``'null'`` stay text. Non-finite floats are written as Hydra reads them (``inf``,
    ``-inf``, ``nan``)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()  # a numpy scalar (a pandas row's value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return repr(float(value))  # 1e+16, inf, -inf, nan: Hydra reads each back as that float
    text = str(value)
    if not quote_text and _PLAIN_TEXT.fullmatch(text) and text.lower() not in _HYDRA_WORDS:
        return text
    # Hydra's quoted strings: only backslashes before a quote or the closing quote are escapes (doubled here).
    escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text).replace("'", "\\'")
    return f"'{escaped}'"


def override_string(key: str, value: Any) -> str:
    """A Hydra command-line override that sets ``key`` to exactly ``value`` (text always quoted)."""
    return f"{key}={override_value(value, quote_text=True)}"


def suggest_key(key: str, known_keys: list[str]) -> str:
    """``did you mean `hydra.sweeper.timeout_s`?``, or the keys beside ``key`` (those of its parent node, or the
    top-level ones): every key of a command, the sweeper's (``hydra.sweeper.*``) included."""
    parent, _, leaf = key.rpartition(".")
    beside = [k for k in known_keys if k.rpartition(".")[0] == parent]
    close = difflib.get_close_matches(leaf, [k.rpartition(".")[2] for k in beside], n=1)  # a typo of its name
    close = [f"{parent}.{close[0]}" if parent else close[0]] if close else []
    elsewhere = [  # the same name under another node (knob.dtype for knobs.dtype)
        k
        for k in known_keys
        if k.rpartition(".")[0] != parent and difflib.SequenceMatcher(None, leaf, k.rpartition(".")[2]).ratio() >= 0.8
    ]
    close = close or difflib.get_close_matches(key, elsewhere, n=1, cutoff=0.8)
    if close:
        return f"did you mean `{close[0]}`?"
    parts = key.split(".")
    for depth in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:depth]) + "."
        names = {k[len(parent) :].split(".")[0] for k in known_keys if k.startswith(parent)}
        siblings = sorted(n for n in names if not n.startswith("_"))
        if names and not siblings:  # hydra.launcher.n_jobs under the basic launcher: the group chosen has none
            node = parent[:-1]
            return f"`{node}` has no settings in this config; choose a {node.replace('.', '/')}=<option> that has it"
        if siblings:
            where = "--cfg hydra" if parent.startswith("hydra.") else "--cfg job"
            more = f", ... ({len(siblings) - 12} more: `{where}` lists them)" if len(siblings) > 12 else ""
            return f"`{parent[:-1]}` has: {', '.join(siblings[:12])}{more}"
    top = sorted({k.split(".")[0] for k in known_keys})
    return f"top-level keys: {', '.join(top)}" if top else "see `python -m sweeper +workload=<name> --cfg job`"
