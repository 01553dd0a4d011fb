"""Pictures: the standard panel of curves, the difference from a baseline run, and the curve explorer's session
(``widgets/curves.py``)."""
