"""Dotted config keys: the one flatten, set-by-dotted-key and override quoting every layer uses.

A config is a nested mapping; a row's columns, the search space and Hydra's command line name its leaves by
dotted keys (``knobs.dtype``). The sweep, the trial config and the report all go through these helpers, so
they can never disagree about what a key means.
"""

from __future__ import annotations

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


def override_string(key: str, value: Any) -> str:
    """A Hydra command-line override that sets ``key`` to exactly ``value``."""
    if value is None:
        return f"{key}=null"
    if isinstance(value, bool):
        return f"{key}={'true' if value else 'false'}"
    if isinstance(value, (int, float)):
        return f"{key}={value!r}"
    # Hydra's quoted strings: only backslashes before a quote or the closing quote are escapes (doubled here).
    escaped = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, str(value)).replace("'", "\\'")
    return f"{key}='{escaped}'"
