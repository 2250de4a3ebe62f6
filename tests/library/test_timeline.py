"""Memory over one step, op by op: the timeline's peak is the meter's peak to the byte, its worst
moment is named where the lessons say it is, and the allocator's trace reads the same way."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from helpers import tiny_config, tiny_model

from course_lib.batch import random_batch
from course_lib.checkpointing import step_flops
from course_lib.memory import measure_step
from course_lib.memory.timeline import (
    ALLOCATOR_METHOD,
    OpEvent,
    StepTimeline,
    allocator_step,
    record_step,
    step_timelines,
    timeline_from_trace,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_the_timeline_peak_is_the_meters_peak(impl):
    model = tiny_model(attn_impl=impl)
    batch = random_batch(model.config.vocab_size, 2, 128)
    timeline = record_step(model, batch, impl)
    assert timeline.peak_bytes == measure_step(model, batch).counted_peak_bytes
    assert timeline.method == "CPU: counted bytes"
    assert [e.index for e in timeline.events] == list(range(len(timeline.events)))
    assert model.config.attn_impl == impl and all(p.grad is None for p in model.parameters())


def test_eager_attention_at_long_rows_peaks_in_the_softmax_backward():
    """Lesson 1's claim: at long rows the eager step's worst moment is a softmax backward, and
    sdpa's (no score matrix kept) is at the loss."""
    config = tiny_config(n_layers=2, max_seq_len=1024)
    eager, sdpa = step_timelines(
        config, 2, 1024, {"eager": {"attn_impl": "eager"}, "sdpa": {"attn_impl": "sdpa"}}
    )
    assert (eager.peak.phase, eager.peak.node) == ("backward", "SoftmaxBackward0")
    assert sdpa.peak.node == "LogSoftmaxBackward0"
    assert eager.peak_bytes > 3 * sdpa.peak_bytes
    assert "SoftmaxBackward0" in eager.describe() and "counted bytes" in eager.describe()


def test_a_checkpointed_step_recomputes_inside_its_backward_pass():
    config = tiny_config(n_layers=4, attn_impl="sdpa", max_seq_len=512)
    plain, ckpt = step_timelines(
        config, 2, 512, {"plain": {}, "checkpointed": {"checkpointing": "blocks"}}
    )
    assert plain.first("recompute") is None
    recomputed = [e for e in ckpt.events if e.phase == "recompute"]
    assert recomputed and all(e.node for e in recomputed)  # inside the backward pass
    assert ckpt.first("forward") < ckpt.first("backward") < ckpt.first("recompute")
    assert ckpt.peak_bytes < plain.peak_bytes


def test_variants_share_weights_and_batch_and_bad_variants_are_named():
    config = tiny_config(n_layers=1)
    first, second = step_timelines(config, 1, 32, {"a": {}, "b": {}}, seed=3)
    assert first.events == second.events  # the same step twice: the same timeline
    with pytest.raises(ValueError, match="at least one variant"):
        step_timelines(config, 1, 32, {})
    with pytest.raises(TypeError, match="no_such_field"):
        step_timelines(config, 1, 32, {"a": {"no_such_field": 1}})


def test_an_empty_timeline_has_no_peak():
    with pytest.raises(ValueError, match="has no events"):
        StepTimeline("nothing", "CPU: counted bytes").peak  # noqa: B018


def _frames(*names: str, filename: str = "/usr/lib/python3/site-packages/torch/x.py") -> list:
    return [{"name": n, "filename": filename, "line": 1} for n in names]


def trace() -> list[dict]:
    """An allocator trace as ``torch.cuda.memory._snapshot()`` holds it: an allocation made
    before the step, the step's marker, then a forward allocation, a backward one, a free."""
    ours = [{"name": "forward", "filename": "/home/me/course_lib/model.py", "line": 180}]
    return [
        {"action": "alloc", "addr": 1, "size": 4096, "frames": []},  # before the step
        {"action": "alloc", "addr": 2, "size": 512 * 7919, "frames": []},
        {"action": "free_requested", "addr": 2, "size": 512 * 7919, "frames": []},
        {"action": "free_completed", "addr": 2, "size": 512 * 7919, "frames": []},
        {"action": "segment_alloc", "addr": 3, "size": 2**21, "frames": []},
        {"action": "alloc", "addr": 3, "size": 1024, "frames": ours + _frames("linear")},
        {
            "action": "alloc",
            "addr": 4,
            "size": 2048,
            "frames": _frames("torch::autograd::generated::SoftmaxBackward0::apply(...)")
            + _frames("torch::autograd::Engine::evaluate_function", "backward"),
        },
        {"action": "free_requested", "addr": 3, "size": 1024, "frames": []},
        {"action": "free_completed", "addr": 3, "size": 1024, "frames": []},
    ]


def test_an_allocator_trace_reads_as_a_timeline_from_the_steps_marker():
    t = timeline_from_trace(trace(), "eager")
    assert t.method == ALLOCATOR_METHOD
    assert [e.live_bytes for e in t.events] == [1024, 3072, 2048]  # the earlier 4096 left out
    assert t.events[0] == OpEvent(0, "forward (model.py:180)", "forward", "", 1024)
    assert (t.peak.phase, t.peak.node) == ("backward", "SoftmaxBackward0")


def test_a_trace_without_the_marker_is_read_whole_and_recomputation_is_named():
    recomputing = _frames("forward", filename="/x/torch/utils/checkpoint.py") + _frames(
        "torch::autograd::Engine::evaluate_function", "MmBackward0::apply"
    )
    entries = [
        {"action": "alloc", "addr": 1, "size": 512, "frames": []},
        {"action": "alloc", "addr": 2, "size": 512, "frames": recomputing},
    ]
    t = timeline_from_trace(entries)
    assert [e.live_bytes for e in t.events] == [512, 1024]
    assert (t.events[1].phase, t.events[1].node) == ("recompute", "MmBackward0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU's refusal")
def test_the_allocator_history_needs_cuda():
    model = tiny_model()
    with pytest.raises(RuntimeError, match="needs CUDA"):
        allocator_step(model, random_batch(model.config.vocab_size, 1, 8))


def test_flops_count_the_recomputation_and_nothing_else():
    config = tiny_config(n_layers=4, attn_impl="sdpa")
    plain = step_flops(config, 2, 64)
    every = step_flops(replace(config, checkpointing="blocks"), 2, 64)
    stride = step_flops(replace(config, checkpointing="blocks", checkpoint_every=3), 2, 64)
    assert step_flops(config, 2, 64, seed=5) == plain  # a count, not a clock
    assert plain < stride < every < plain * 4 / 3  # the head is never recomputed
    # blocks 0 and 3 of 4 recomputed: half the extra work of recomputing all four
    assert stride - plain == pytest.approx((every - plain) / 2, rel=1e-9)
    with pytest.raises(ValueError, match="max_seq_len"):
        step_flops(config, 1, 10**6)
