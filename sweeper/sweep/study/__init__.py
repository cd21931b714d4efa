"""The Optuna study behind named functions: opening its storage (journal lock, bounded waits), every attribute the
sweeper writes or reads named once (``attrs``), every private Optuna name read in one module (``optuna_private``),
telling outcomes, resume bookkeeping, and the kill points of the data-loss tests."""
