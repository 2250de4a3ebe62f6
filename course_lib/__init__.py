"""Shapes: sequence length and batch size are not interchangeable. The course's library."""

__version__ = "0.1.0"
