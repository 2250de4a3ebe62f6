"""Pointers for the instructor: the code read before it runs, leaks, disguises undone."""
