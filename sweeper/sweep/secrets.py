"""Storage passwords never printed or written: masked as ``***`` wherever a storage URL is shown or saved.

A password given on the command line (``hydra.sweeper.storage=postgresql://user:pw@host/db``) is taken out of the
arguments before Hydra sees them (``hide_argv``): Hydra, which prints each job's overrides and saves them and the
config under ``results/multirun/``, only ever holds ``postgresql://user:***@host/db``. The real URL stays in this
process's environment (``KNOB_SWEEPER_STORAGE_URL``), which trials inherit (in-process, joblib workers, SLURM jobs
submitted from here); ``reveal`` puts it back where the storage is opened. Better still, keep passwords out of URLs:
libpq's ``PGPASSWORD`` or a ``~/.pgpass`` file (mode 0600) are read by the driver, and ``storage=postgres`` builds
its URL from ``PGUSER``/``PGHOST``/``PGPORT``/``PGDATABASE``.

A URL with a password written in a config file instead reaches the sweeper in plain text: ``hide_config_password``
then moves it to the environment the same way and masks it in every job's overrides (so in every saved file).
"""

from __future__ import annotations

import os
import re

ENV = "KNOB_SWEEPER_STORAGE_URL"
_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@?#]*):(?P<password>[^@/?#]*)@")
_QUERY = re.compile(r"(?P<head>[?&]password=)(?P<password>[^&#]*)", re.I)
_KEYS = ("hydra.sweeper.storage",)


def mask(url: str | None) -> str:
    """``url`` with its password (user info or ``password=`` query parameter) replaced by ``***``."""
    if not url:
        return "" if url is None else url
    text = _USERINFO.sub(lambda m: f"{m['head']}:***@" if m["password"] else m[0], str(url))
    return _QUERY.sub(lambda m: m["head"] + "***", text)


def has_password(url: str | None) -> bool:
    return bool(url) and mask(url) != url


def hide_argv(argv: list[str]) -> list[str]:
    """``argv`` with the storage URL's password masked; the real URL goes to the environment (``ENV``)."""
    out = []
    for arg in argv:
        key, eq, value = arg.partition("=")
        value = value.strip().strip("'\"") if eq else value
        if eq and key.lstrip("+~") in _KEYS and has_password(value):
            os.environ[ENV] = value
            arg = f"{key}='{mask(value)}'"
        out.append(arg)
    return out


def hide_config_password(url: str | None) -> list[str]:
    """The override that masks a password the composed config holds in plain text (a storage URL written in a
    YAML file, which ``hide_argv`` never saw): Hydra composes every job's config again from the same files and
    saves it under ``results/multirun/``, so each job gets ``hydra.sweeper.storage='<masked>'``; the real URL goes
    to the environment like one from the command line. Empty when there is nothing to hide."""
    if not has_password(url):
        return []
    os.environ[ENV] = str(url)
    return [f"{_KEYS[0]}='{mask(url)}'"]


def reveal(url: str | None) -> str | None:
    """The real URL for a masked one (from ``ENV``, when it masks to the same text); any other URL as it is."""
    real = os.environ.get(ENV)
    if url and "***" in url and real and mask(real) == url:
        return real
    return url


def scrub(text: str) -> str:
    """``text`` with every password of a known storage URL (the environment's) replaced by ``***``."""
    real = os.environ.get(ENV)
    for pattern in (_USERINFO, _QUERY):
        m = pattern.search(real or "")
        if m and m["password"]:
            text = text.replace(m["password"], "***")
    return text
