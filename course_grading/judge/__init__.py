"""Deciding points: the items and their trusted checks, the call protocol, plain data, verdicts."""
