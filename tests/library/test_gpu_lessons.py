"""``benchmarks/gpu_lessons.py``, the five lessons on CUDA, checked where there is no GPU: it says
so and exits 0; its reading of the lessons' printed figures holds on a real run (on the CPU, with
``--allow-cpu``), fails where a statement does not, and reads cells that exist."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_lessons.py"


@pytest.fixture(scope="module")
def gpu_lessons():
    spec = importlib.util.spec_from_file_location("gpu_lessons", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_lessons"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    yield module
    del sys.modules["gpu_lessons"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the run without a GPU")
def test_without_cuda_it_says_so_and_exits_0(gpu_lessons, capsys):
    assert gpu_lessons.main([]) == 0
    assert "no CUDA device" in capsys.readouterr().out


def test_every_cell_it_reads_is_a_code_cell_of_its_lesson(gpu_lessons):
    source = SCRIPT.read_text()
    for lesson in gpu_lessons.lessons(None):
        check = source[source.index(f"def lesson_{lesson[:2]}(") :].split("\ndef ", 1)[0]
        ids = set(re.findall(r'"(cell-\d+|l0\d-[\w-]+|setup-[\w-]+|[0-9a-f]{8})"', check))
        nb = nbformat.read(str(ROOT / "solutions" / lesson / f"{lesson}.ipynb"), as_version=4)
        code = {c.get("id") for c in nb.cells if c.cell_type == "code"}
        assert ids and ids <= code, (lesson, ids - code)


def test_the_claims_hold_on_a_real_run_of_two_lessons(gpu_lessons, capsys, tmp_path):
    """Lessons 1 and 5 executed here on the CPU: every statement it reads is found and holds."""
    out = tmp_path / "claims.json"
    assert gpu_lessons.main(["--allow-cpu", "--lessons", "01", "05", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "FAIL" not in printed and "not printed" not in printed, printed
    assert printed.count("ok  ") >= 10 and "'CPU: counted bytes'" in printed


GPU = "GPU: allocator peak"
TABLE = """path       shape   measured  predicted pred/meas
eager   32 × 64     27.4 MiB   27.4 MiB    {ratio}
sdpa     2 × 1024   25.5 MiB   25.5 MiB    1.0000
"""
TIMELINE = """eager: peak 141 MiB in the backward pass, aten._softmax_backward_data in SoftmaxBackward0 (CPU: counted bytes)
sdpa: peak 25.5 MiB in the backward pass, aten._log_softmax_backward_data in LogSoftmaxBackward0 (CPU: counted bytes)
eager: peak {allocated} in the backward pass, {node} (GPU: allocator history)
sdpa: peak 26 MiB in the backward pass, torch::autograd::generated::LogSoftmaxBackward0 (GPU: allocator history)
"""  # noqa: E501


def lesson_1_printed(ratio="1.0210", allocated="144 MiB", node="SoftmaxBackward0", eager="5.12"):
    return {
        "cell-002": f"torch 2.11 on cuda; memory is measured as '{GPU}'",
        "cell-012": TABLE.format(ratio=ratio),
        "cell-102": f"measured eager peak, 2 × 1024 over 32 × 64  : {eager}×  ({GPU})\n"
        "measured sdpa peak, same two shapes     : 1.00×",
        "l01-setup-timeline": TIMELINE.format(allocated=allocated, node=node),
        "cell-115": " 16 × 256  measured   88.1 MiB (fits)  <- yours\n",
    }


def failed(gpu_lessons, printed) -> list[str]:
    return [c.says for c in gpu_lessons.lesson_01(printed, GPU) if c.ok is False]


def test_a_gpu_run_that_keeps_every_statement_passes(gpu_lessons):
    assert failed(gpu_lessons, lesson_1_printed()) == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"ratio": "1.0800"}, "within a few percent"),  # the model 8 % off the allocator
        ({"node": "MmBackward0"}, "eager's worst moment"),  # the peak elsewhere
        ({"allocated": "190 MiB"}, "the allocator's peak is the counted peak"),
        ({"eager": "16.00"}, "eager's peak grows"),  # as much as the scores: nothing dilutes
    ],
)
def test_a_statement_that_does_not_hold_fails(gpu_lessons, change, says):
    assert any(says in claim for claim in failed(gpu_lessons, lesson_1_printed(**change)))


def test_a_run_measured_another_way_or_missing_its_target_fails(gpu_lessons):
    printed = lesson_1_printed()
    printed["cell-002"] = "torch 2.11 on cpu; memory is measured as 'CPU: counted bytes'"
    printed["cell-115"] = " 16 × 256  measured    101 MiB (too big)  <- yours\n"
    found = failed(gpu_lessons, printed)
    assert "memory is measured as 'GPU: allocator peak'" in found
    assert "target practice's answer, counted on the CPU, fits 100 MiB here" in found


def test_sizes_read_in_every_unit(gpu_lessons):
    assert [gpu_lessons._mib(t) for t in ("512 KiB", "1.5 GiB", "2,048 B")] == [
        0.5,
        1536.0,
        2048 / 2**20,
    ]
