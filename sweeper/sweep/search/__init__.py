"""What to try next: samplers (the staged default and Optuna's own), the cost model and the budget's clock, the
handbook start, warm start, duplicates and pruning."""
