"""The step peak as a line in the micro-batch, for any depth, read off short models.

Every tensor of a training step grows linearly with the rows of the micro-batch (for two rows and
more: one row skips the labels' copy, 8 bytes per token), so the live bytes at each allocation of
:func:`~course_lib.hf.replay.replay` are ``a + b * rows``: one replay at 2 and one at 3
rows give the peak at every micro-batch, so the largest micro-batch that fits a budget is found
by :func:`course_lib.fit.find_largest` over :meth:`PeakLine.peak` in microseconds. The same holds
layer for layer in the depth, so the line of a 32- or 80-layer model is read off models of 6 and
7 layers and carried over (:func:`peak_line`); ``tests/library/test_finetune_plan.py`` checks it
against full replays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .arch import Arch, StepSpec
from .models import record_step
from .replay import replay


@dataclass
class PeakLine:
    """The step's live bytes at each allocation, as ``a + b * rows`` (two rows and more), and
    the parameter gradients made before it (``g``): with all ``G`` gradients already there,
    the live bytes are ``a + b * rows - g + G``."""

    a: list[int]
    b: list[int]
    g: list[int]
    where: list[str]

    def peak(self, rows: int, grads: int | None) -> tuple[int, str, int]:
        """``(peak bytes, where, bytes per extra row there)`` at ``rows`` rows, with ``grads``
        bytes of gradients there from the start (``None``: none, as after ``zero_grad``).

        Args:
            rows: the micro-batch.
            grads: gradient bytes there from the start, or ``None``.

        Returns:
            ``(peak bytes, where, bytes per extra row there)``.
        """
        g = [0] * len(self.a) if grads is None else self.g
        best = max(range(len(self.a)), key=lambda i: self.a[i] + self.b[i] * rows - g[i])
        total = self.a[best] + self.b[best] * rows - g[best] + (grads or 0)
        return total, self.where[best], self.b[best]


_LAYER = re.compile(r"layers\.(\d+)\.")
ENDS = 3  # layers kept at each end of the stack when the line is read off a shorter model


def _logs(arch: Arch, spec: StepSpec, n_layers: int) -> list[list[tuple[str, int, int]]]:
    """Allocation logs at 2 and 3 rows of ``arch`` cut to ``n_layers``, middle layers dropped."""

    def label(m: re.Match) -> str:
        i = int(m.group(1))
        return f"layers.{i}." if i < ENDS else f"layers.top-{n_layers - 1 - i}."

    arch = replace(arch, num_hidden_layers=n_layers)
    out = []
    for rows in (2, 3):
        log = replay(record_step(arch, replace(spec, batch_size=rows)), log=True).log
        assert log is not None  # replay(..., log=True) keeps one
        kept = []
        for where, live, grads in log:
            m = _LAYER.search(where)
            if m and ENDS <= int(m.group(1)) < n_layers - ENDS:
                continue  # a middle layer: never above both ends (see _peak_line)
            kept.append((_LAYER.sub(label, where), live, grads))
        out.append(kept)
    return out


def peak_line(arch: Arch, spec: StepSpec) -> PeakLine:
    """The step's live bytes as a line in the rows, for any depth, from short models.

    Every live byte count is affine in the rows (two and more) and, layer for layer, affine in
    the number of layers: what the layers below (or above) keep grows by a fixed amount per
    layer. So the line is read off models of ``2 ENDS`` and ``2 ENDS + 1`` layers, at 2 and 3
    rows, and carried to the real depth; a middle layer's moments are never above both the
    ends' (its base is between theirs), so only the three layers at each end are followed.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.

    Returns:
        The :class:`PeakLine`.

    Raises:
        AssertionError: the recorded ops changed with the rows or the depth (the line would not
            hold); a bug in the recipes, not in the caller's input.
    """
    L = arch.num_hidden_layers
    base = min(L, 2 * ENDS)
    s2, s3 = _logs(arch, spec, base)
    t2, t3 = _logs(arch, spec, base + 1) if L > base else (s2, s3)
    names = [w for w, _, _ in s2]
    if any([w for w, _, _ in log] != names for log in (s3, t2, t3)):
        raise AssertionError("the step's ops changed with the rows or the depth")
    extra = L - base

    def at_depth(short, longer):  # affine in the depth
        return [x + (y - x) * extra for x, y in zip(short, longer)]

    live = {key: at_depth([e[1] for e in lo], [e[1] for e in hi]) for key, lo, hi in (
        (2, s2, t2), (3, s3, t3))}  # fmt: skip
    grads = at_depth([e[2] for e in s2], [e[2] for e in t2])
    b = [y - x for x, y in zip(live[2], live[3])]
    a = [x - 2 * s for x, s in zip(live[2], b)]
    return PeakLine(a, b, grads, names)
