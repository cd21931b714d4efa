"""Helpers shared by the JPEG pipeline's tests (tests/test_data.py, tests/test_decode.py)."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest
import torch

from workloads import data

CPU = torch.device("cpu")

TINY = {"corpus_images": 8, "corpus_width": 32, "corpus_height": 24, "corpus_sizes": "fixed"}


@pytest.fixture(autouse=True)
def one_thread() -> Any:
    """One intra-op thread: on the shared 2-core CI machine a second one mostly waits for a busy core."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def knobs(**over: Any) -> dict[str, Any]:
    base = {
        "num_workers": 0,
        "prefetch_factor": None,
        "pin_memory": False,
        "non_blocking": False,
        "persistent_workers": False,
        "decode_device": "cpu",
    }
    return {**base, **over}


def pipeline(
    tmp_path: Path,
    p: dict[str, Any] | None = None,
    device: torch.device = CPU,
    batch_size: int = 4,
    memory_format: torch.memory_format = torch.contiguous_format,
    **knob: Any,
) -> data.Pipeline:
    return data.Pipeline(
        p or dict(TINY),
        knobs(**knob),
        batch_size=batch_size,
        image_size=16,
        device=device,
        memory_format=memory_format,
        cache_root=tmp_path / "data",
        num_classes=10,
    )


def children() -> set[int]:
    return {c.pid for c in mp.active_children()}
