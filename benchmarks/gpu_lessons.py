"""The five lessons on a GPU (``make bench-gpu``): every answered student notebook executed on
CUDA, and every statement the lessons make about the GPU path checked against what the run printed.

    .venv/bin/python benchmarks/gpu_lessons.py                  # all five lessons, on CUDA
    .venv/bin/python benchmarks/gpu_lessons.py --lessons 01 04  # some of them
    .venv/bin/python benchmarks/gpu_lessons.py --allow-cpu      # the same checks on the CPU

Each lesson's student notebook (``notebooks/``) is answered with the solution's answer cells (its
written answers left as a placeholder), executed top to bottom with nbclient (``CI=1``: the
explorers draw one frame; they are not the GPU path), with ``pick_device()`` choosing CUDA. Then
the statements are read off the cells' printed output (:data:`CLAIMS`): the memory is measured as
"GPU: allocator peak"; the memory model's predictions stand within a few percent of the
allocator's peaks (lessons 1 and 4 say so); the measured ratios the lessons quote keep their
direction (eager's peak grows at a fixed budget, sdpa's does not; checkpointing's cut grows with
the rows and stays below the block count); the worst moment of a step is where the lessons put
it, in the allocator's own history too; the target-practice answers, counted on the CPU, still
fit under the allocator; the memory model sits above the measured probes of lesson 5's search
and agrees with its limit. Each claim prints with the figure that decided it; step-time ratios
are printed, not checked (the lessons say they depend on the machine).

Without CUDA it says so and exits 0; ``--allow-cpu`` runs everything on the CPU instead (the
checks then expect "CPU: counted bytes" and skip the allocator's history), which is how the
script's own reading of the lessons is tested here. The exit status is 1 when a claim fails or a
lesson raises.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_TOLERANCE = 0.05  # "expect a few percent of difference" on a GPU (lesson 1, section 3)
TIMELINE_TOLERANCE = 0.10  # the allocator's peak beside the counted one, over one step
WRITTEN = "(a written answer: not part of the GPU run)"
_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
_NUMBER = r"[\d,]+(?:\.\d+)?"


@dataclass
class Claim:
    """One statement of a lesson, checked on this run: what it says, what was measured."""

    lesson: str
    says: str
    measured: str
    ok: bool | None  # None: printed for the record, not checked (a timing)


def answered(release: Path, solution: Path):
    """The student notebook with every code answer taken from the solution (markers removed)."""
    import nbformat

    nb = nbformat.read(str(release), as_version=4)
    source = nbformat.read(str(solution), as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in source.cells}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("solution"):
            continue
        if cell.cell_type == "code":
            lines = by_id[meta["grade_id"]].source.split("\n")
            cell.source = "\n".join(x for x in lines if not x.strip().startswith(_MARKERS))
        else:
            cell.source = WRITTEN
    return nb


def execute(lesson: str, timeout: int = 600) -> tuple[dict[str, str], float, str]:
    """Run one lesson's answered notebook: ``({cell id: its printed text}, seconds, error)``."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = answered(
        ROOT / "notebooks" / lesson / f"{lesson}.ipynb",
        ROOT / "solutions" / lesson / f"{lesson}.ipynb",
    )
    was = os.environ.get("CI")
    os.environ["CI"] = "1"  # one static frame per explorer: the widgets are not the GPU path
    error, start = "", time.perf_counter()
    with tempfile.TemporaryDirectory() as cwd:
        client = NotebookClient(
            nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": cwd}}
        )
        try:
            client.execute()
        except CellExecutionError as exc:
            error = str(exc).strip().splitlines()[-1][:300]
        finally:
            if was is None:
                del os.environ["CI"]
            else:
                os.environ["CI"] = was
    return printed(nb), time.perf_counter() - start, error


def printed(nb) -> dict[str, str]:
    """Every code cell's stdout, by cell id."""
    out = {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            text = [
                o.get("text", "")
                for o in cell.get("outputs", [])
                if o.get("output_type") == "stream" and o.get("name") == "stdout"
            ]
            out[cell.get("id", "")] = "".join(text)
    return out


# --- reading the printed figures -----------------------------------------------------------------


def _mib(text: str) -> float:
    """``"141 MiB"``, ``"5.45 MiB"``, ``"1.2 GiB"`` in MiB."""
    value, unit = re.fullmatch(rf"({_NUMBER})\s*(B|KiB|MiB|GiB|TiB)", text.strip()).groups()
    scale = {"B": 2**-20, "KiB": 2**-10, "MiB": 1.0, "GiB": 1024.0, "TiB": 2.0**20}[unit]
    return float(value.replace(",", "")) * scale


def table_ratios(text: str) -> list[tuple[str, float]]:
    """``(row, predicted / measured)`` of a measured-against-predicted table (lessons 1 and 4)."""
    rows = re.findall(
        rf"^(\w+\s+\d+ × \d+)\s+{_NUMBER} \w?i?B\s+{_NUMBER} \w?i?B\s+(\d+\.\d+)", text, re.M
    )
    return [(" ".join(row.split()), float(ratio)) for row, ratio in rows]


_DESCRIBED = re.compile(
    r"^(\w+): peak (.+?B) in (?:the \w+ pass|a recomputation), (.+) "
    r"\((CPU: counted bytes|GPU: allocator history)\)$",
    re.M,
)


def timeline_peaks(text: str) -> dict[tuple[str, str], tuple[float, str]]:
    """``{(label, method): (peak MiB, where)}`` from :meth:`StepTimeline.describe` lines."""
    return {
        (label, method): (_mib(size), where)
        for label, size, where, method in _DESCRIBED.findall(text)
    }


def _within(ratios: list[tuple[str, float]], tolerance: float) -> tuple[str, bool]:
    if not ratios:
        return "no measured row printed", False
    worst = max(ratios, key=lambda r: abs(r[1] - 1))
    return f"worst {worst[0]}: predicted / measured {worst[1]:.4f}", abs(worst[1] - 1) <= tolerance


# --- the lessons' statements ---------------------------------------------------------------------

Check = Callable[[dict[str, str], str], list[Claim]]


def _method(lesson: str, out: dict[str, str], method: str, cell: str) -> Claim:
    line = next((ln for ln in out.get(cell, "").splitlines() if "measured as" in ln), "not printed")
    return Claim(lesson, f"memory is measured as '{method}'", line, f"'{method}'" in line)


def _timeline(lesson: str, text: str, method: str, expected: dict[str, str]) -> list[Claim]:
    """The worst moment where the lesson puts it, counted and (on a GPU) in the allocator's
    history; the allocator's peak beside the counted one."""
    peaks, claims = timeline_peaks(text), []
    methods = ["CPU: counted bytes"] + (["GPU: allocator history"] if "GPU" in method else [])
    for label, node in expected.items():
        for how in methods:
            size, where = peaks.get((label, how), (0.0, "not printed"))
            claims.append(
                Claim(
                    lesson,
                    f"{label}'s worst moment is in {node} ({how})",
                    f"{size:.1f} MiB, {where}",
                    node in where,
                )
            )
        if len(methods) == 2 and (label, methods[1]) in peaks:
            counted, allocated = peaks[(label, methods[0])][0], peaks[(label, methods[1])][0]
            ratio = allocated / counted if counted else float("inf")
            claims.append(
                Claim(
                    lesson,
                    f"{label}: the allocator's peak is the counted peak, "
                    f"within {TIMELINE_TOLERANCE:.0%}",
                    f"{allocated:.1f} MiB against {counted:.1f} MiB (×{ratio:.3f})",
                    abs(ratio - 1) <= TIMELINE_TOLERANCE,
                )
            )
    return claims


def lesson_01(out: dict[str, str], method: str) -> list[Claim]:
    name = "01"
    claims = [_method(name, out, method, "cell-002")]
    row, ok = _within(table_ratios(out.get("cell-012", "")), MODEL_TOLERANCE)
    claims.append(
        Claim(name, "the memory model is within a few percent of every measured peak", row, ok)
    )
    close = out.get("cell-102", "")
    eager = re.search(r"measured eager peak.*: (\d+\.\d+)×", close)
    sdpa = re.search(r"measured sdpa peak.*: (\d+\.\d+)×", close)
    e, s = (float(eager.group(1)) if eager else 0.0), (float(sdpa.group(1)) if sdpa else 0.0)
    claims.append(
        Claim(
            name,
            "same tokens, longer rows: eager's peak grows, by far less than the "
            "score elements' 16×",
            f"×{e:.2f}",
            1.5 < e < 16,
        )
    )
    claims.append(
        Claim(name, "sdpa's peak hardly moves across the splits", f"×{s:.2f}", 0 < s < 1.2)
    )
    claims += _timeline(
        name,
        out.get("l01-setup-timeline", ""),
        method,
        {"eager": "SoftmaxBackward0", "sdpa": "LogSoftmaxBackward0"},
    )
    target = out.get("cell-115", "")
    mine = re.search(r"^.*<- yours$", target, re.M)
    claims.append(
        Claim(
            name,
            "target practice's answer, counted on the CPU, fits 100 MiB here",
            mine.group(0).strip() if mine else "not printed",
            bool(mine) and "(fits)" in mine.group(0),
        )
    )
    return claims


def lesson_04(out: dict[str, str], method: str) -> list[Claim]:
    name = "04"
    claims = [_method(name, out, method, "cell-002")]
    table = out.get("cell-011", "")
    row, ok = _within(table_ratios(table), MODEL_TOLERANCE)
    claims.append(
        Claim(name, "the predictions pass through the points (within a few percent)", row, ok)
    )
    cuts = [float(c) for c in re.findall(r"every block cuts the peak (\d+\.\d+)×", table)]
    rising = all(b >= a * 0.98 for a, b in zip(cuts, cuts[1:]))
    claims.append(
        Claim(
            name,
            "the cut grows with the sequence, then levels off, below the 4 blocks",
            " → ".join(f"{c:.2f}×" for c in cuts),
            bool(cuts) and rising and max(cuts) < 4,
        )
    )
    fit = re.findall(
        r"^checkpointed (\d+) × \d+: measured (.+?) \((.+?)\) -> (fits|does not fit)",
        out.get("cell-019", ""),
        re.M,
    )
    first = fit[0] if fit else None
    claims.append(
        Claim(
            name,
            "the memory model's largest checkpointed batch really fits",
            f"{first[0]} rows: {first[1]} -> {first[3]}" if first else "not printed",
            bool(first) and first[3] == "fits",
        )
    )
    target = re.search(
        r"your stride \d+ .*-> (fits|does not fit)", out.get("setup-target-measured", "")
    )
    claims.append(
        Claim(
            name,
            "target practice's answer fits 16 MiB here",
            target.group(0) if target else "not printed",
            bool(target) and target.group(1) == "fits",
        )
    )
    claims += _timeline(
        name,
        out.get("l04-setup-timeline", ""),
        method,
        {"plain": "LogSoftmaxBackward0", "checkpointed": "Backward"},
    )
    for line in out.get("cell-015", "").splitlines():
        if "ratio ×" in line:
            claims.append(Claim(name, "a step-time ratio (printed, not checked)", line, None))
    return claims


def lesson_05(out: dict[str, str], method: str) -> list[Claim]:
    name = "05"
    claims = [_method(name, out, method, "cell-002")]
    search = out.get("cell-009", "")
    ratios = [
        float(r)
        for r in re.findall(r"^\s*\d+\s+\d+\s+(?:True|False)\s+.+?\s+(\d+\.\d+)$", search, re.M)
    ]
    claims.append(
        Claim(
            name,
            "the memory model sits above every measured probe",
            f"model / measured from {min(ratios, default=0):.3f} to {max(ratios, default=0):.3f}",
            bool(ratios) and min(ratios) >= 1,
        )
    )
    limits = re.search(r"memory model: (\d+)\s+measured: (\d+)", search)
    claims.append(
        Claim(
            name,
            "the model's limit and the measured one agree",
            f"model {limits.group(1)}, measured {limits.group(2)}" if limits else "not printed",
            bool(limits) and limits.group(1) == limits.group(2),
        )
    )
    return claims


def lesson_02(out: dict[str, str], method: str) -> list[Claim]:
    line = next((ln for ln in out.get("cell-002", "").splitlines() if "measured as" in ln), "")
    return [Claim("02", "the lesson says how it measures", line or "not printed", bool(line))]


def lesson_03(out: dict[str, str], method: str) -> list[Claim]:
    text = out.get("2ae74766", "")
    claims = [
        Claim(
            "03",
            f"memory is measured as '{method}'",
            text.splitlines()[0] if text else "not printed",
            f"'{method}'" in text,
        )
    ]
    rows = re.findall(rf"^\s*(\d+)\s+({_NUMBER} \w?i?B)\s+({_NUMBER} \w?i?B)", text, re.M)
    accumulated = [_mib(a) for _, a, _ in rows]
    one = [_mib(b) for _, _, b in rows]
    flat = bool(rows) and max(accumulated[1:] or accumulated) <= 1.1 * min(
        accumulated[1:] or accumulated
    )
    claims.append(
        Claim(
            "03",
            "an accumulated step's peak stays put as K grows, one batch's grows",
            f"accumulated {accumulated}, one batch {one} MiB",
            flat and one[-1] > 2 * one[0],
        )
    )
    return claims


CLAIMS: dict[str, Check] = {
    "01": lesson_01,
    "02": lesson_02,
    "03": lesson_03,
    "04": lesson_04,
    "05": lesson_05,
}


def lessons(prefixes: list[str] | None) -> list[str]:
    names = sorted(p.parent.name for p in ROOT.glob("solutions/*/*.ipynb"))
    return [n for n in names if not prefixes or n[:2] in prefixes]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", nargs="*", help="lesson numbers (01 ... 05); default: all")
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU without CUDA")
    parser.add_argument("--out", help="write every claim and figure to this JSON file")
    args = parser.parse_args(argv)
    import torch

    from course_lib.memory import measurement_method

    if not torch.cuda.is_available() and not args.allow_cpu:
        print(
            "no CUDA device: the lessons' GPU run is skipped (it needs a CUDA build of torch "
            "and a GPU; --allow-cpu runs the same checks on the CPU)"
        )
        return 0
    method = measurement_method()
    card = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    print(f"the lessons on {card} (torch {torch.__version__}), memory measured as '{method}'")
    claims, failed = [], False
    for lesson in lessons(args.lessons):
        out, seconds, error = execute(lesson)
        print(
            f"\n{lesson}: {seconds:.1f} s top to bottom" + (f"; STOPPED: {error}" if error else "")
        )
        failed |= bool(error)
        for claim in CLAIMS[lesson[:2]](out, method):
            mark = {True: "ok  ", False: "FAIL", None: "    "}[claim.ok]
            print(f"  {mark} {claim.says}: {claim.measured}")
            failed |= claim.ok is False
            claims.append(claim)
    if args.out:
        Path(args.out).write_text(json.dumps([asdict(c) for c in claims], indent=1))
    print("\nevery claim held" if not failed else "\nsome claims failed: see FAIL above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
