"""Running trials: slots and the scheduler, admission into the budget, a trial's job and its launch through Hydra's
launcher, settling outcomes, re-measurements, recovery from interrupts and dead sweepers, and the console."""
