"""A reader of the bash that verl launchers are written in (nothing is executed): :mod:`.lex` lexes,
:mod:`.expand` expands words, :mod:`.script` runs the commands in order and returns the verl launch lines.
:mod:`mlite.export.importer` reads launchers with it."""
