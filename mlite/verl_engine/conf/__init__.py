"""Hydra config groups of the lite engine (``engine/lite.yaml``), found with ``hydra.searchpath=[pkg://mlite.verl_engine.conf]``."""
