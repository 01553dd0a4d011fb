"""Step time per plan: the time model (:mod:`mlite.time.model`), hardware profiles (:mod:`mlite.time.hardware`),
calibration on the user's machine (:mod:`mlite.time.calibrate`)."""

from __future__ import annotations

from .hardware import HardwareProfile, hardware_names, load_hardware
from .model import PARTS, StepTime, predict

__all__ = ["PARTS", "HardwareProfile", "StepTime", "hardware_names", "load_hardware", "predict"]
