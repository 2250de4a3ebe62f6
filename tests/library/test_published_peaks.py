"""The published-peaks table and its benchmark's split (no network, no GPU, no peer tool).

Every row of ``benchmarks/published_peaks.json`` must say where it comes from, what was measured
and, per tool, whether that tool was calibrated on it; the benchmark's held-out figures must be
computed from those roles alone, so a calibration row can never reach them.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "planner_vs_published.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("planner_vs_published", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rows(bench):
    return bench.load_rows()


def good_row() -> dict:
    return {
        "source": "a page",
        "source_id": "page",
        "citation": "https://example.org/page, table 1",
        "model": "m",
        "measured_kind": "allocated",
        "peak_allocated_mib": 1000.0,
        "setting": {"batch_size": 1},
        "role": {"planner": "held-out", "fitcheck": "held-out", "accelerate": "held-out"},
    }


def test_every_row_names_source_citation_kind_and_role(bench, rows):
    assert len(rows) >= 100
    for row in rows:
        for field in bench.REQUIRED:
            assert row[field], (row["model"], field)
        assert row["measured_kind"] in bench.KINDS
        assert set(row["role"]) == set(bench.TOOLS)
        if row["source_id"] == "Shapes H200 runs":  # this repository's own script, named
            script = row["citation"].split(" ")[0]
            assert (BENCH.parents[1] / script).is_file(), row["citation"]
        else:
            assert row["citation"].startswith("https://"), row["citation"]


def test_the_t4_rows_the_planner_was_set_from_are_calibration(rows):
    t4 = [r for r in rows if r["source_id"] == "fitcheck-llm T4"]
    assert len(t4) == 69
    assert all(r["role"]["planner"] == "calibration" for r in t4)
    # fitcheck's own manifest: 49 fitted rows and 8 repeats of them, 12 held out
    assert sum(r["role"]["fitcheck"] == "held-out" for r in t4) == 12
    others = [r for r in rows if r["source_id"] != "fitcheck-llm T4" and not r.get("calibrates")]
    assert others and all(r["role"]["planner"] == "held-out" for r in others)


def test_the_hopper_context_is_the_first_h200_pass_and_nothing_else():
    """HOPPER_CONTEXT is the lowest and highest context of the first pass's runs, whose device
    rows (and only those) say they calibrate it; the second pass holds it out."""
    from course_lib.hf.cards import CONTEXT, HOPPER_CONTEXT

    measured = json.loads((BENCH.parent / "measured_peaks.json").read_text())
    marked = [r for r in measured["rows"] if r.get("calibrates")]
    assert marked and all(
        r["measured_kind"] == "device" and r["role"]["planner"] == "calibration"
        and r["citation"].endswith("(first pass)") and "HOPPER_CONTEXT" in r["calibrates"]
        for r in marked
    )  # fmt: skip
    first = [r["context_mib"] for r in measured["results"] if r["pass"] == 1]
    assert len(marked) == len(first) == 17
    assert HOPPER_CONTEXT == (int(min(first) * 2**20), int(max(first) * 2**20))
    assert CONTEXT["H200"] == CONTEXT["H100 80GB"] == HOPPER_CONTEXT
    second = [r for r in measured["rows"] if r["citation"].endswith("(second pass)")]
    assert len(second) == 18 and all(set(r["role"].values()) == {"held-out"} for r in second)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda r: r.pop("citation"), "no 'citation'"),
        (lambda r: r.pop("source_id"), "no 'source_id'"),
        (lambda r: r.pop("measured_kind"), "no 'measured_kind'"),
        (lambda r: r.pop("role"), "no 'role'"),
        (lambda r: r.update(measured_kind="nvidia"), "none of"),
        (lambda r: r.update(measured_kind="unstated"), "must say what was measured"),
        (lambda r: r.update(measured_kind="reserved"), "no number peak_reserved_mib"),
        (lambda r: r["role"].pop("accelerate"), "each of"),
        (lambda r: r["role"].update(planner="train"), "none of"),
        (lambda r: r.pop("setting"), "expressible false and why_not"),
    ],
)
def test_a_row_without_its_fields_is_refused(bench, change, message):
    bench.validate_row(0, good_row())  # the good row passes
    row = good_row()
    change(row)
    with pytest.raises(ValueError, match=message):
        bench.validate_row(7, row)


def test_load_rows_refuses_a_file_with_one_bad_row(bench, tmp_path):
    row = good_row()
    del row["citation"]
    path = tmp_path / "peaks.json"
    path.write_text('{"rows": [' + json.dumps(row) + "]}")
    with pytest.raises(ValueError, match="row 0 .* no 'citation'"):
        bench.load_rows(path)


def test_split_follows_each_tools_role(bench):
    cal, held = good_row(), good_row()
    cal["role"] = {"planner": "calibration", "fitcheck": "held-out", "accelerate": "held-out"}
    split = bench.split_errors([cal, held], {0: 1.5, 1: 1.02}, "planner")
    assert split["calibration"] == {("page", "allocated"): [pytest.approx(0.5)]}
    assert split["held-out"] == {("page", "allocated"): [pytest.approx(0.02)]}
    # the same row is held out for fitcheck, which was not set from it
    split = bench.split_errors([cal, held], {0: 1.5, 1: 1.02}, "fitcheck")
    assert split["calibration"] == {}
    assert sorted(split["held-out"][("page", "allocated")]) == pytest.approx([0.02, 0.5])


def test_no_calibration_row_reaches_the_held_out_figures(bench, rows):
    # ratio 1 + 1e-6 * (i + 1) tags each row, so every error names the row it came from
    ratios = {i: 1 + 1e-6 * (i + 1) for i, r in enumerate(rows) if r.get("setting")}
    for tool in bench.TOOLS:
        split = bench.split_errors(copy.deepcopy(rows), ratios, tool)
        for role, groups in split.items():
            for errors in groups.values():
                for e in errors:
                    assert rows[round(e * 1e6) - 1]["role"][tool] == role
        n = sum(len(v) for groups in split.values() for v in groups.values())
        assert n == len(ratios)


def test_the_band_counts_held_out_device_rows_inside_and_above(bench, monkeypatch, capsys):
    class Band:  # HFMemory's names: the band's bottom and its top
        device_bytes_low = 900 * 2**20
        device_bytes = 1100 * 2**20

    rows = []
    for mib, role in ((1000.0, "held-out"), (1200.0, "held-out"), (1000.0, "calibration")):
        row = good_row()
        row.update(measured_kind="device", peak_device_mib=mib)
        row["role"]["planner"] = role
        rows.append(row)
    monkeypatch.setattr(bench, "planner_memory", lambda row: Band())
    bench.print_band(rows)
    assert "1 of 2 held-out device-level rows inside it, 1 above it" in capsys.readouterr().out


def test_the_band_count_reads_the_planners_own_attributes(bench, rows, capsys):
    """The count once read an attribute HFMemory never had and so never printed: run it on
    the real rows and the real planner."""
    bench.print_band(rows)
    assert "held-out device-level rows inside it" in capsys.readouterr().out


def verdict_row(**changes) -> dict:
    row = dict(good_row(), measured_kind="verdict", outcome="oom", card="T4")
    row.pop("peak_allocated_mib")
    row.update(changes)
    return row


def test_a_verdict_row_needs_its_outcome_and_a_card(bench):
    bench.validate_row(0, verdict_row())  # the good one passes
    for bad in (verdict_row(outcome="crashed"), verdict_row(card="a card"),
                verdict_row(outcome=None)):  # fmt: skip
        with pytest.raises(ValueError, match="outcome in"):
            bench.validate_row(3, bad)


def test_every_verdict_row_is_held_out_and_counted_by_its_outcome(bench, rows, monkeypatch, capsys):
    verdicts = [r for r in rows if r["measured_kind"] == "verdict"]
    assert len(verdicts) >= 25 and all(r["role"]["planner"] == "held-out" for r in verdicts)
    assert {r["outcome"] for r in verdicts} == {"fits", "oom"}
    # the counts follow the planner's verdict and the outcome, nothing else: a planner that
    # always says "fits" is counted as allowing every run that ran out of memory
    monkeypatch.setattr(bench, "verdict", lambda row: "fits")
    counts = bench.print_verdicts(verdicts)
    assert sum(n for (_, o, v), n in counts.items() if (o, v) == ("oom", "fits")) == sum(
        r["outcome"] == "oom" for r in verdicts
    )
    assert "allowed runs that ran out of memory" in capsys.readouterr().out
