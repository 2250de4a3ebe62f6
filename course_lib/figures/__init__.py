"""Figures as pure functions: a result in, a matplotlib ``Figure`` out (nothing shown or saved).

One module per lesson, plus the shared style:

* :mod:`~course_lib.figures.style`: colours, MiB, the helpers every lesson draws with;
* :mod:`~course_lib.figures.attention`: lesson 1, tokens per step and attention memory;
* :mod:`~course_lib.figures.padding`: lesson 2, padding, packing and the careless-packing leak;
* :mod:`~course_lib.figures.accumulation`: lesson 3, gradient accumulation;
* :mod:`~course_lib.figures.checkpointing`: lesson 4, activation checkpointing;
* :mod:`~course_lib.figures.choosing`: lesson 5, choosing the numbers.

A figure never trains, packs, measures or plans: the module that owns the concept computes a
result (a dataclass, or plain lists of numbers) and the figure draws it. Lessons call these
directly for static plots and through :mod:`course_lib.widgets` for sliders. Measured values are
drawn as markers, predictions as lines, so the two are never confused. Every figure raises a
``ValueError`` naming what is missing when its input is empty or inconsistent.
"""

import matplotlib

matplotlib.use(
    matplotlib.get_backend()
)  # resolve the backend now: keeps the inline one in notebooks
