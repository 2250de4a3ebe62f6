"""Shared test helpers: a tiny seeded TinyGPT and padded micro-batches, the answered student
notebook, how the browser tests start Chromium and wait for their Jupyter server (``from
helpers import``).

They live here, not in ``conftest.py``: a test module imports them by name, and several
``conftest.py`` files (one per test folder) would shadow each other as a module called
``conftest``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest
import torch

from course_lib.batch import IGNORE_INDEX
from course_lib.data import PAD_ID, VOCAB_SIZE
from course_lib.model import TinyGPT, TinyGPTConfig

#: Debian's Chromium, which the browser tests drive (never a downloaded browser).
CHROMIUM = Path("/usr/bin/chromium")
#: Headless, and without requests of its own (updates, sync, background networking).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def tiny_config(**overrides) -> TinyGPTConfig:
    """The course's test model: 2 blocks of d_model 64, 4 heads, rows up to 512 tokens."""
    fields = dict(vocab_size=VOCAB_SIZE, d_model=64, n_heads=4, n_layers=2, max_seq_len=512)
    return TinyGPTConfig(**{**fields, **overrides})


def tiny_model(dtype: torch.dtype = torch.float32, seed: int = 0, **overrides) -> TinyGPT:
    """A :func:`tiny_config` TinyGPT with weights fixed by ``seed``."""
    torch.manual_seed(seed)
    return TinyGPT(tiny_config(**overrides)).to(dtype)


def micro_batch(gen: torch.Generator, rows: list[tuple[int, int]]) -> dict:
    """A right-padded batch of rows ``(prompt_len, completion_len)``.

    Prompt and padding labels are -100, so with ``prompt_len >= 1`` a row holds exactly
    ``completion_len`` shifted loss tokens.
    """
    seq_len = max(p + c for p, c in rows)
    input_ids = torch.randint(0, VOCAB_SIZE, (len(rows), seq_len), generator=gen)  # (B, T)
    attention_mask = torch.zeros(len(rows), seq_len, dtype=torch.long)
    labels = torch.full((len(rows), seq_len), IGNORE_INDEX)
    for r, (p, c) in enumerate(rows):
        attention_mask[r, : p + c] = 1
        labels[r, p : p + c] = input_ids[r, p : p + c]
        input_ids[r, p + c :] = PAD_ID
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


# A written answer in a student's own words (never the model answer, which a submission may not
# hold: the grader flags it and withholds its feedback).
WRITTEN_ANSWER = (
    "A bigger effective batch gives cleaner gradients but fewer optimiser updates per epoch; "
    "on a small dataset the run ends before the model has had enough steps to learn."
)


def answered(release: Path, solution: Path) -> nbformat.NotebookNode:
    """The student notebook ``release`` with every answer cell answered, as an honest student who
    got everything right hands it in: each code answer is the solution's code (its solution markers
    gone), each written answer in a student's own words."""
    nb = nbformat.read(str(release), as_version=4)
    source = nbformat.read(str(solution), as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in source.cells}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution"):
            continue
        if cell.cell_type == "code":
            lines = by_id[meta["grade_id"]].source.split("\n")
            markers = ("### BEGIN SOLUTION", "### END SOLUTION")
            cell.source = "\n".join(x for x in lines if not x.strip().startswith(markers))
        else:
            cell.source = WRITTEN_ANSWER
    return nb


def wait_for_jupyter(server: subprocess.Popen, url: str, log: Path, seconds: float) -> None:
    """Wait until the Jupyter server ``server`` (started in a session of its own) answers at
    ``url``; if it ends or ``seconds`` pass first, kill its process group and fail with the tail
    of its ``log``."""
    deadline = time.time() + seconds
    while True:
        try:
            urllib.request.urlopen(f"{url}/api/status", timeout=2)
            return
        except OSError:
            if server.poll() is not None or time.time() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(server.pid, signal.SIGKILL)
                pytest.fail(f"Jupyter did not start: {log.read_text()[-2000:]}")
            time.sleep(0.5)
