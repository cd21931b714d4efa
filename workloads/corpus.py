"""The generated JPEG corpus of resnet50's ``jpeg`` pipeline: ImageNet-like photos, written once, reused by trials.

Images are smooth noise at three scales plus per-pixel grain (quality 90: ~100 KB at 500x375, like an average
ImageNet photo). With ``workload.corpus_sizes: imagenet`` (the default) their sizes vary as ImageNet's do: the long
side drawn around ``corpus_width`` (200-800 px at the default 500), mostly 4:3 landscape, some portrait, square and
wide, so decode costs vary from image to image as they do on real data; ``fixed`` writes every image at
``corpus_width x corpus_height``. The corpus lives in ``<cache_root>/jpeg-<w>x<h>-<n>[-imagenet]``.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torchvision.io import encode_jpeg

CORPUS_CLASSES = 10  # class subfolders of the generated corpus
CORPUS_QUALITY = 90
MANIFEST = "corpus.json"  # written last inside the corpus: its presence marks a complete corpus
SIZES = ("imagenet", "fixed")
# (width / height, share) of ImageNet-like photos: mostly 4:3 landscape, then portrait, square and wide.
ASPECTS = ((4 / 3, 0.6), (3 / 4, 0.2), (1.0, 0.1), (16 / 9, 0.1))


def corpus_path(p: dict[str, Any], cache_root: str | os.PathLike[str]) -> Path:
    """``<cache_root>/jpeg-<w>x<h>-<n>[-imagenet]`` for the workload's ``corpus_*`` parameters."""
    w, h, n = int(p.get("corpus_width", 500)), int(p.get("corpus_height", 375)), int(p.get("corpus_images", 2048))
    sizes = corpus_sizes(p)
    suffix = "" if sizes == "fixed" else f"-{sizes}"
    return Path(cache_root).expanduser().resolve() / f"jpeg-{w}x{h}-{n}{suffix}"


def corpus_sizes(p: dict[str, Any]) -> str:
    sizes = str(p.get("corpus_sizes") or "imagenet")
    if sizes not in SIZES:
        raise ValueError(f"workload.corpus_sizes must be one of {SIZES}, got {sizes!r}")
    return sizes


def image_sizes(images: int, width: int, height: int, sizes: str) -> list[tuple[int, int]]:
    """(width, height) of each corpus image: all ``width x height`` (``fixed``), or varied like ImageNet's.

    ``imagenet``: the long side is normal around ``width`` (sd 22 %), clipped to [0.4, 1.6] x ``width`` (200-800 px
    at 500), the aspect drawn from :data:`ASPECTS`; deterministic (seed 0).
    """
    if sizes == "fixed":
        return [(width, height)] * images
    gen = torch.Generator().manual_seed(1)
    longs = (torch.randn(images, generator=gen) * 0.22 + 1.0).clamp(0.4, 1.6) * width
    shares = torch.tensor([s for _, s in ASPECTS])
    picks = torch.multinomial(shares, images, replacement=True, generator=gen)
    out = []
    for long, pick in zip(longs.tolist(), picks.tolist()):
        aspect = ASPECTS[pick][0]
        w, h = (long, long / aspect) if aspect >= 1 else (long * aspect, long)
        out.append((max(8, round(w)), max(8, round(h))))
    return out


def synthetic_image(gen: torch.Generator, width: int, height: int) -> torch.Tensor:
    """A natural-looking uint8 (3, height, width) image: smooth noise at three scales plus per-pixel grain."""
    lh, lw = max(2, height // 4), max(2, width // 4)
    low = torch.zeros(1, 3, lh, lw)
    for cells, amp in ((4, 1.0), (16, 0.5), (lw, 0.35)):  # coarse blobs, mid-scale texture, fine detail
        noise = torch.rand(1, 3, max(2, math.ceil(cells * height / width)), cells, generator=gen)
        low += amp * F.interpolate(noise, size=(lh, lw), mode="bilinear", align_corners=False)
    img = F.interpolate(low, size=(height, width), mode="bilinear", align_corners=False)[0]
    grain = torch.randint(-40, 41, (3, height, width), generator=gen, dtype=torch.int16)
    return (img * (255 / 1.85)).to(torch.int16).add_(grain).clamp_(0, 255).to(torch.uint8)


def write_corpus(folder: Path, images: int, width: int, height: int, sizes: str = "fixed") -> None:
    """``images`` JPEGs in up to ``CORPUS_CLASSES`` class subfolders (ImageFolder layout), then the manifest."""
    gen = torch.Generator().manual_seed(0)
    classes = min(CORPUS_CLASSES, images)  # no empty class folder: ImageFolder rejects those
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # per-image ops are small: threads only add contention
    try:
        for c in range(classes):
            (folder / f"class_{c:03d}").mkdir()
        for i, (w, h) in enumerate(image_sizes(images, width, height, sizes)):
            data = encode_jpeg(synthetic_image(gen, w, h), quality=CORPUS_QUALITY)
            (folder / f"class_{i % classes:03d}" / f"{i:06d}.jpg").write_bytes(data.numpy().tobytes())
    finally:
        torch.set_num_threads(threads)
    manifest = {
        "images": images,
        "width": width,
        "height": height,
        "sizes": sizes,
        "quality": CORPUS_QUALITY,
        "classes": classes,
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))


def ensure_corpus(path: Path, images: int, width: int, height: int, sizes: str = "fixed") -> str:
    """Generate the corpus at ``path`` unless it is there; returns "reused", "generated" or "discarded".

    It is written into a temporary sibling folder and renamed into place (atomic), so concurrent trials never read
    a partial corpus. When two trials generate at once, the one whose rename comes second discards its copy and
    uses the winner's ("discarded").
    """
    if (path / MANIFEST).is_file():
        return "reused"
    if path.exists():
        raise RuntimeError(f"{path} exists but holds no complete corpus (no {MANIFEST}); delete it and run again")
    if images < 1 or width < 8 or height < 8:
        raise ValueError(f"workload.corpus_images/width/height must be >= 1/8/8, got {images}/{width}/{height}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the corpus is shared by every trial
    try:
        write_corpus(tmp, images, width, height, sizes)
        try:
            os.rename(tmp, path)
        except OSError:  # ENOTEMPTY/EEXIST: another process renamed its complete copy first
            if not (path / MANIFEST).is_file():
                raise
            return "discarded"
        return "generated"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # left only when the rename did not happen
