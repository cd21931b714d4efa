"""Names of the Optuna trial attributes the sweeper writes (one definition for the loop, the samplers, warm start)."""

OWNER_KEY = "owner"  # trial user attr: host:pid of the sweeper that asked it
REASON_KEY = "reason"
COST_KEY = "wall_s"  # trial user attr: its wall time in seconds (the Parquet column of that name)
WARM_KEY = "warm_start_from"  # trial user attr of a trial added from an earlier study (sweeper.sweep.warm)
