"""The Optuna study behind named functions: opening its storage (journal lock, bounded waits), the attributes the
sweeper writes on trials, telling outcomes, resume bookkeeping, and the kill points of the data-loss tests."""
