"""mlite-lab: plan, debug-run and analyze verl + Megatron Lite (mlite) training.

Importing :mod:`mlite` imports no UI library and no torch; submodules load what they need.
"""

__version__ = "0.1.0"
