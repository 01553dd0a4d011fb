"""Validation used only by tests and benchmarks: the estimator held against Megatron-Core (:mod:`.mcore_oracle`) and
against published verl RL runs (:mod:`.rl_check`). Nothing else in ``mlite/`` imports this package."""
