"""The profile path against bench/gpu_checks.py's mfu_cap reading, on the same steps of one workload, in one process.

    python bench/profile_check.py OUT_DIR [--smoke] [--steps 10] [KEY=VALUE ...]

Builds transformer_block at the default sweep's best configuration (``gpu_checks.MFU_CAP_CONFIG``: bf16, compiled,
batch 8, fused AdamW), warms it up, then profiles ``--steps`` steps twice: through the trial's profile path
(``sweeper.trial.profile.capture``: the trace, ``prof_*`` columns) and through ``gpu_checks``' own reading
(``kernel_s_by_class``: torch.profiler's device events, its own kernel classes). Prints and appends to
OUT_DIR/profile_check.jsonl one JSON line per reading and one comparing their matmul + attention shares of the
kernel time (within 5 points is the target). KEY=VALUE overrides change the configuration (e.g. a sweep's best:
``knobs.batch_size=16 knobs.sdpa_backend=cudnn``). ``--smoke`` runs the tiny preset on the CPU (checks the script).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import gpu_checks as gc  # noqa: E402 (after the path set-up above)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--steps", type=int, default=10)
    args, args.overrides = p.parse_known_args()  # the rest: Hydra overrides applied over the mfu_cap configuration
    args.out.mkdir(parents=True, exist_ok=True)
    import torch
    from torch.profiler import ProfilerActivity, profile

    import workloads
    from sweeper.trial.profile import capture

    b = gc.Checks(args.out, args.smoke)
    keys = {o.split("=", 1)[0] for o in args.overrides}
    base = ["device=cpu"] if args.smoke else [o for o in gc.MFU_CAP_CONFIG if o.split("=", 1)[0] not in keys]
    overrides = base + args.overrides
    cfg = b.config("transformer_block", overrides)
    device = torch.device(cfg["device"])
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    work = workloads.load("transformer_block").build(cfg, device)
    rows = []
    try:
        for _ in range(3 if args.smoke else 6):  # compile + warm-up
            work.step(work.next_batch())
        sync()
        t0 = time.perf_counter()
        cols = capture(work, device, args.steps, args.out / "traces" / "profile_check.json.gz")
        rows.append(
            {
                "reading": "profile_path",
                "s": time.perf_counter() - t0,
                **cols,
                "matmul_attention_frac": cols["prof_k_matmul_frac"] + cols["prof_k_attention_frac"],
            }
        )
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities) as prof:
            for _ in range(args.steps):
                work.step(work.next_batch())
            sync()
    finally:
        work.close()
    per_class = gc.kernel_s_by_class(prof, args.steps, cuda)
    total = sum(per_class.values())
    share = (per_class.get("gemm", 0.0) + per_class.get("attention", 0.0)) / total if total else float("nan")
    rows.append(
        {
            "reading": "gpu_checks_mfu_cap",
            "kernel_ms": {k: v * 1e3 for k, v in per_class.items()},
            "matmul_attention_frac": share,
        }
    )
    diff = rows[0]["matmul_attention_frac"] - share
    rows.append(
        {
            "reading": "compare",
            "device": str(device),
            "overrides": overrides,
            "profile_path": rows[0]["matmul_attention_frac"],
            "gpu_checks": share,
            "diff_points": diff * 100,
            "within_5_points": abs(diff) <= 0.05,
        }
    )
    with open(args.out / "profile_check.jsonl", "a") as f:
        for row in rows:
            line = json.dumps(row, default=str)
            f.write(line + "\n")
            print(line, flush=True)


if __name__ == "__main__":
    main()
