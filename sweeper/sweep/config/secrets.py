"""Storage passwords never printed or written: masked as ``***`` wherever a storage URL is shown or saved.

A password given on the command line (``hydra.sweeper.storage=postgresql://user:pw@host/db``) is taken out of the
arguments before Hydra sees them (``hide_argv``): Hydra, which prints each job's overrides and saves them and the
config under ``results/multirun/``, only ever holds ``postgresql://user:***@host/db``. The real URL stays in this
process's environment (``KNOB_SWEEPER_STORAGE_URL``), which trials inherit (in-process, joblib workers, SLURM jobs
submitted from here); ``reveal`` puts it back where the storage is opened. Better still, keep passwords out of URLs:
libpq's ``PGPASSWORD`` or a ``~/.pgpass`` file (mode 0600) are read by the driver, and ``storage=postgres`` builds
its URL from ``PGUSER``/``PGHOST``/``PGPORT``/``PGDATABASE``.

URLs are read by SQLAlchemy's own parser (``make_url``; ``render_as_string(hide_password=True)``), never by a
pattern: a password may hold ``/ ? # :`` unencoded, or ``%2F`` encoded, and both spellings are hidden. A URL the
parser refuses (``postgresql://u:p@ss:w?rd@host/db``) has everything between ``://user:`` and its last ``@``
hidden. URLs that are not SQLAlchemy's (``journal:///path``) hold no password.

A URL with a password written in a config file instead reaches the sweeper in plain text: ``hide_config_password``
then moves it to the environment the same way and masks it in every job's overrides (so in every saved file).
"""

from __future__ import annotations

import os
import re
from typing import Any

ENV = "KNOB_SWEEPER_STORAGE_URL"
_KEYS = ("hydra.sweeper.storage",)
# SQLAlchemy's reading of user info: the user is up to the first ':', '/' or '@'; the password up to the next '@'
_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@]*):(?P<password>[^@]*)@")
_USERINFO_LAST_AT = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/@]*):(?P<password>.*)@")  # unparseable
_QUERY = re.compile(r"(?P<head>[?&]password=)(?P<password>[^&#]*)", re.I)
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")
_PAIR_IN_TEXT = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<password>'[^']*'|\"[^\"]*\"|[^\s&'\"]+)", re.I)


def _parsed(url: str) -> Any | None:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url)
    except Exception:  # noqa: BLE001 - any text SQLAlchemy cannot read as a URL
        return None


def mask(url: str | None) -> str:
    """``url`` with its password (user info or ``password=`` query parameter) replaced by ``***``; a URL without
    a password as it is."""
    if not url:
        return "" if url is None else url
    text = str(url)
    if not passwords(text):
        return text
    parsed = _parsed(text)
    if parsed is None or _several_ats(text):
        m = _USERINFO_LAST_AT.match(text)
        text = f"{m['head']}:***@{text[m.end() :]}" if m else text
        return _QUERY.sub(lambda q: q["head"] + "***", text)
    return _QUERY.sub(lambda q: q["head"] + "***", parsed.render_as_string(hide_password=True))


def _several_ats(text: str) -> bool:
    """An unencoded ``@`` in the password (``user:ab:cd@TAIL@host``): SQLAlchemy reads the password up to the first
    ``@`` and the rest as the host; everything up to the last ``@`` is taken for the password instead."""
    first, last = _USERINFO.match(text), _USERINFO_LAST_AT.match(text)
    return bool(first and last and first.end() != last.end())


def passwords(url: str | None) -> list[str]:
    """Every spelling of ``url``'s passwords (as written, and decoded), longest first; empty when none."""
    if not url:
        return []
    text = str(url)
    found: set[str] = set()
    parsed = _parsed(text)
    for pattern in (_USERINFO, _USERINFO_LAST_AT) if parsed is not None else (_USERINFO_LAST_AT,):
        m = pattern.match(text)
        if m and m["password"]:
            found.add(m["password"])
    found.update(q["password"] for q in _QUERY.finditer(text) if q["password"])
    if parsed is not None:
        if parsed.password:
            found.add(str(parsed.password))
        found.update(str(v) for k, v in parsed.query.items() if k.lower() == "password" and v)
    return sorted(found, key=len, reverse=True)


def has_password(url: str | None) -> bool:
    return bool(passwords(url))


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


def is_masked(url: str | None) -> bool:
    """``url``'s passwords are all ``***`` already (a URL ``hide_argv`` or this module masked)."""
    return bool(passwords(url)) and set(passwords(url)) <= {"***"}


def hide_config_password(url: str | None) -> list[str]:
    """The override that masks a password the composed config holds in plain text (a storage URL written in a
    YAML file, which ``hide_argv`` never saw): Hydra composes every job's config again from the same files and
    saves it under ``results/multirun/``, so each job gets ``hydra.sweeper.storage='<masked>'``; the real URL goes
    to the environment like one from the command line. Empty when there is nothing to hide (a URL masked
    already keeps the real one in the environment: it is not replaced by its masked spelling)."""
    if not has_password(url) or is_masked(url):
        return []
    os.environ[ENV] = str(url)
    return [f"{_KEYS[0]}='{mask(url)}'"]


def hide_composed(argv: list[str], composed: Any) -> list[str]:
    """``argv`` and, when the config it composes (``composed``, with its ``hydra`` node) holds a storage password
    in plain text (a URL written in one's own YAML file), the override that masks it: everything Hydra prints
    (``--cfg hydra``, ``--cfg all``, ``--info``) and saves then holds ``***``, as for a URL given on the command
    line (``hide_argv``)."""
    if composed is None:
        return argv
    from omegaconf import OmegaConf

    try:
        url = OmegaConf.select(composed, _KEYS[0], throw_on_resolution_failure=False)
    except Exception:  # noqa: BLE001 - a node that does not resolve holds nothing to hide here
        return argv
    extra = hide_config_password(url if isinstance(url, str) else None)
    # Before the first override: Hydra's parser takes no override after a flag (`+workload=x --cfg hydra`).
    at = next((i for i, a in enumerate(argv) if "=" in a and not a.startswith("-")), len(argv))
    return argv[:at] + extra + argv[at:]


def reveal(url: str | None) -> str | None:
    """The real URL for a masked one (from ``ENV``, when it masks to the same text); any other URL as it is."""
    real = os.environ.get(ENV)
    if url and "***" in url and real and mask(real) == url:
        return real
    return url


WITHHELD = "text withheld: it holds part of the storage password (percent-encode @ : / in a password)"
_PART = 4  # characters: a run this long of a password, found in a driver's text, withholds the text
_CUTS = re.compile(r"[@:/?#&%]")  # where a parser cuts an unencoded password (user info, host, port, path, query)


def scrub(text: str, *urls: str | None, withhold: bool = False) -> str:
    """``text`` (an error message, a log line) with no password: those of the known storage URL (the
    environment's) and of ``urls`` in every spelling, and each piece of them between the characters a URL parser
    cuts at (``p@ss:TAILSECRET99`` read as password ``p``, host ``ss`` and port ``TAILSECRET99``), every URL in it
    masked, every ``password=...`` hidden.

    ``withhold``: a driver's error text, shown to say why a storage did not open. One that still holds any part of
    a password (a run of ``_PART`` of its characters) is not shown at all: ``WITHHELD``."""
    secrets = {p for u in (os.environ.get(ENV), *urls) for p in passwords(u)} - {"***"}
    pieces = {piece for p in secrets for piece in _CUTS.split(p) if len(piece) >= _PART}
    for secret in sorted(secrets | pieces, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _URL_IN_TEXT.sub(lambda m: mask(m[0]), text)
    text = _PAIR_IN_TEXT.sub(lambda m: m["head"] + "***", text)
    if withhold:
        for secret in secrets:
            k = min(_PART, len(secret))
            if k >= 3 and any(secret[i : i + k] in text for i in range(len(secret) - k + 1)):
                return WITHHELD
    return text
