"""Runs inside a trial process forked from the forkserver: which modules that process started with (imports only
``sys``, so it adds none of those asked about)."""

from __future__ import annotations

import sys
from typing import Any


def imported(names: list[str], conn: Any) -> None:
    conn.send({name: name in sys.modules for name in names})
