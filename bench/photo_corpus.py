"""An ImageFolder of real photographs for the JPEG pipeline (``workload.root``): crops of the sample photographs
that scikit-image ships, at ImageNet-like sizes, as JPEG quality 90.

    python bench/photo_corpus.py OUT_DIR [--images 2048] [--classes 10]

Each file is a different crop (position, size, aspect, mirror) of one of the photographs, resized so its long side
falls in 200-800 px (mostly 4:3 landscape, as ImageNet's): real photographic content, so decode costs are those of
real photos rather than of generated noise. Needs scikit-image and Pillow (both on the GPU image).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import numpy as np
from PIL import Image

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina",
          "motorcycle_left", "motorcycle_right", "cat", "lily", "kidney", "cells3d")  # fmt: skip
ASPECTS = ((4 / 3, 0.6), (3 / 4, 0.2), (1.0, 0.1), (16 / 9, 0.1))


def photos() -> list[Image.Image]:
    from skimage import data

    out = []
    for name in PHOTOS:
        try:
            img = np.asarray(getattr(data, name)())
        except Exception:  # noqa: BLE001 - a photograph this scikit-image does not ship (or would download)
            continue
        if img.ndim == 3 and img.shape[-1] in (3, 4) and img.dtype == np.uint8 and min(img.shape[:2]) >= 256:
            out.append(Image.fromarray(img[..., :3]))
    if not out:
        raise SystemExit("photo_corpus: scikit-image ships none of the photographs")
    return out


def main() -> None:
    a = argparse.ArgumentParser(description=__doc__)
    a.add_argument("out", type=Path)
    a.add_argument("--images", type=int, default=2048)
    a.add_argument("--classes", type=int, default=10)
    args = a.parse_args()
    rng = random.Random(0)
    sources = photos()
    for c in range(args.classes):
        (args.out / f"c{c:02d}").mkdir(parents=True, exist_ok=True)
    for i in range(args.images):
        src = sources[i % len(sources)]
        aspect = rng.choices([r for r, _ in ASPECTS], [w for _, w in ASPECTS])[0]
        w0, h0 = src.size
        cw = int(min(w0, h0 * aspect) * rng.uniform(0.5, 1.0))
        ch = int(cw / aspect)
        x, y = rng.randint(0, w0 - cw), rng.randint(0, h0 - ch)
        crop = src.crop((x, y, x + cw, y + ch))
        if rng.random() < 0.5:
            crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
        long_side = rng.randint(200, 800)
        scale = long_side / max(cw, ch)
        crop = crop.resize((max(1, int(cw * scale)), max(1, int(ch * scale))), Image.BICUBIC)
        crop.save(args.out / f"c{i % args.classes:02d}" / f"{i:06d}.jpg", quality=90)
    print(f"photo_corpus: {args.images} crops of {len(sources)} photographs -> {args.out}")


if __name__ == "__main__":
    main()
