"""Bad input across the public API: every call gives a clear error that names the problem.

One row per mistake a student or an instructor is likely to make. Each must raise the stated
exception type with a message naming the offending value (checked by regex): no NaN, no silent
truncation, no traceback from deep inside torch.
"""

import pytest
import torch

from course_lib import (
    accumulation,
    budget,
    checkpointing,
    collate,
    data,
    isolation,
    memory,
    packing,
    plan,
)
from course_lib.lessons import checkpointing as lesson4
from course_lib.model import TinyGPT, TinyGPTConfig

CFG = TinyGPTConfig(d_model=32, n_heads=4, n_layers=1, max_seq_len=64)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return TinyGPT(CFG)


@pytest.fixture(scope="module")
def examples():
    return data.make_instruction_dataset(4, seed=0, max_len=200)


def ids(*shape):
    return torch.zeros(*shape, dtype=torch.long)


CASES = [
    # budget
    ("negative micro-batch", lambda m, ex: budget.tokens_per_step(-1, 128), ValueError, "-1"),
    ("fractional seq_len", lambda m, ex: budget.tokens_per_step(2, 12.5), ValueError, "12.5"),
    (
        "zero accumulation",
        lambda m, ex: budget.effective_batch_size(2, 0),
        ValueError,
        "grad_accum_steps.*0",
    ),
    ("bool devices", lambda m, ex: budget.effective_batch_size(2, 2, True), ValueError, "True"),
    ("empty dataset", lambda m, ex: budget.steps_per_epoch(0, 16), ValueError, "dataset_size.*0"),
    (
        "nothing fits",
        lambda m, ex: budget.find_max_batch_size(lambda n: False),
        budget.NoBatchFitsError,
        "batch size 1 does not fit",
    ),
    (
        "search from 0",
        lambda m, ex: budget.find_max_batch_size(lambda n: True, start=0),
        ValueError,
        "start.*0",
    ),
    (
        "budget too small",
        lambda m, ex: plan.plan(CFG, 1000, 64, 800),
        budget.NoBatchFitsError,
        "micro-batch 1",
    ),
    (
        "plan longer than the model",
        lambda m, ex: plan.plan(CFG, 10**9, 128, 800),
        ValueError,
        "seq_len=128",
    ),
    # memory
    ("zero heads", lambda m, ex: memory.attention_elements(2, 0, 8), ValueError, "n_heads.*0"),
    (
        "prediction too long",
        lambda m, ex: memory.activation_bytes(CFG, 1, 65),
        ValueError,
        "seq_len=65",
    ),
    (
        "integer dtype",
        lambda m, ex: memory.activation_bytes(CFG, 1, 8, dtype=torch.int32),
        ValueError,
        "dtype",
    ),
    ("measure a number", lambda m, ex: memory.measure(3), TypeError, "callable"),
    # packing
    (
        "over-long sequence",
        lambda m, ex: packing.pack_lengths([10, 2300], 2048),
        ValueError,
        "sequence 1 has 2300 tokens, longer than capacity 2048",
    ),
    ("zero capacity", lambda m, ex: packing.pack_lengths([1], 0), ValueError, "capacity.*0"),
    (
        "empty sequence",
        lambda m, ex: packing.pack_lengths([3, 0], 8),
        ValueError,
        "sequence 1 has length 0",
    ),
    (
        "unknown strategy",
        lambda m, ex: packing.pack_lengths([3], 8, strategy="magic"),
        ValueError,
        "magic",
    ),
    (
        "collator capacity too small",
        lambda m, ex: packing.PackingCollator(16, 256)(ex),
        ValueError,
        "longer than capacity 16",
    ),
    (
        "isolation on over-long docs",
        lambda m, ex: isolation.check_isolation(m, ex, 16),
        ValueError,
        "longer than capacity 16",
    ),
    # collate
    ("empty batch", lambda m, ex: collate.PaddingCollator(256)([]), ValueError, "empty"),
    (
        "empty example",
        lambda m, ex: collate.PaddingCollator(256)([{"input_ids": []}]),
        ValueError,
        "example 0 has 0 tokens",
    ),
    (
        "labels of the wrong length",
        lambda m, ex: collate.PaddingCollator(256)([{"input_ids": [1, 2, 3], "labels": [1, 2]}]),
        ValueError,
        "2 labels for 3 tokens",
    ),
    (
        "zero sampler batch",
        lambda m, ex: collate.LengthGroupedSampler([3, 4], 0),
        ValueError,
        "batch_size.*0",
    ),
    (
        "no batches to measure",
        lambda m, ex: collate.padding_stats([]),
        ValueError,
        "at least one batch",
    ),
    # accumulation
    (
        "float labels",
        lambda m, ex: accumulation.count_loss_tokens(torch.zeros(2, 3)),
        TypeError,
        "float32",
    ),
    (
        "empty window",
        lambda m, ex: accumulation.accumulate_gradients(m, []),
        ValueError,
        "window is empty",
    ),
    (
        "unknown mode",
        lambda m, ex: accumulation.accumulate_gradients(
            m, [{"input_ids": ids(1, 4), "labels": ids(1, 4)}], mode="sum"
        ),
        ValueError,
        "mode='sum'",
    ),
    (
        "zero-token window",
        lambda m, ex: accumulation.accumulate_gradients(
            m, [{"input_ids": ids(1, 4), "labels": torch.full((1, 4), -100)}]
        ),
        ValueError,
        "no loss token",
    ),
    # model
    (
        "labels of the wrong shape",
        lambda m, ex: m(input_ids=ids(2, 4), labels=ids(2, 3)),
        ValueError,
        r"labels has shape \(2, 3\)",
    ),
    ("float token ids", lambda m, ex: m(input_ids=torch.zeros(2, 4)), ValueError, "float32"),
    (
        "row longer than the model",
        lambda m, ex: m(input_ids=ids(1, 65)),
        ValueError,
        "seq_len=65 is longer than max_seq_len=64",
    ),
    (
        "token id out of range",
        lambda m, ex: m(input_ids=torch.full((1, 4), 999)),
        ValueError,
        "999",
    ),
    (
        "no label at all",
        lambda m, ex: m(input_ids=ids(1, 4), labels=torch.full((1, 4), -100)),
        ValueError,
        "no label token",
    ),
    (
        "heads do not divide width",
        lambda m, ex: TinyGPTConfig(d_model=30, n_heads=4),
        ValueError,
        "d_model=30",
    ),
    # data, checkpointing
    ("encode a number", lambda m, ex: data.encode(123), TypeError, "str"),
    (
        "dataset cap too small",
        lambda m, ex: data.make_instruction_dataset(4, max_len=10),
        ValueError,
        "max_len=10",
    ),
    (
        "zero batch timing",
        lambda m, ex: checkpointing.time_checkpointing(CFG, 0, 8),
        ValueError,
        "batch_size.*0",
    ),
    (
        "negative budget",
        lambda m, ex: lesson4.max_batch_under_budget(CFG, 32, -5),
        ValueError,
        "-5",
    ),
]


@pytest.mark.parametrize("name, call, exc, message", CASES, ids=[c[0] for c in CASES])
def test_bad_call_names_the_problem(model, examples, name, call, exc, message):
    with pytest.raises(exc, match=message) as info:
        call(model, examples)
    # A clear error is raised by course_lib itself, not by torch's internals.
    assert "torch/" not in str(info.traceback[-1].path), f"{name}: raised from inside torch"
