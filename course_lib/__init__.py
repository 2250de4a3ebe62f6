"""Shapes: sequence length and batch size are not interchangeable. The course's library."""

__version__ = "0.3.0"  # the one version source (pyproject.toml reads it); see CHANGELOG.md
