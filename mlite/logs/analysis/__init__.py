"""What the records mean: failure lines (events), series detectors (NaN, spikes, drift, KL at zero), the roles a
metric plays (loss, grad norm...) and the comparison of two runs."""
