"""Plumbing that every layer uses: atomic file writes, file checksums, workers that end with their parent, the
one-run-per-folder lock, command-line types and error handling, progress bars, the DLLogger and VisualDL logs, the
private Paddle calls and the training stopwatch.

These are the leaves: a module here imports no other project module outside utils/, so anything in the project
may import it.
"""
