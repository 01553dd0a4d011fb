"""Reading bytes: sources (files, globs, run directories) and their format, plain or gzip blocks of complete lines,
the ``grep -F`` prefilter, text decoding and cleaning, and the progress bar."""
