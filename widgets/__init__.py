"""ipywidgets views that compose :mod:`mlite` calls; no logic lives here."""
