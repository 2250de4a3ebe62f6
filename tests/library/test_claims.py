"""The lessons' claims that code can check, checked (``docs/claims.md`` lists every claim and
where the course measures it; these are the rows whose evidence is a test).

Each test measures what the lesson says, on the lesson's own model where it is cheap, and each
names the sentence it backs. Where a claim was once wrong (issue 39), the test also shows that
the old wording's number is not what is measured.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from course_lib.collate import LengthGroupedSampler
from course_lib.data import example_lengths, make_instruction_dataset
from course_lib.memory import activation_bytes, compare_checkpointing
from course_lib.model import TinyGPT, TinyGPTConfig
from course_lib.plan import plan

LESSON_1 = TinyGPTConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=1024)


def score_elements_saved(config: TinyGPTConfig, batch_size: int, seq_len: int) -> int:
    """Elements of every ``(B, H, T, T)`` tensor autograd saves in one forward pass, counted
    with ``saved_tensors_hooks`` (each storage once): the stored attention scores."""
    torch.manual_seed(0)
    model = TinyGPT(config)
    ids = torch.randint(3, config.vocab_size, (batch_size, seq_len))
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 4 and tuple(t.shape[-2:]) == (seq_len, seq_len):
            seen[t.untyped_storage().data_ptr()] = t.numel()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids, labels=ids)  # the forward records what the backward will need
    return sum(seen.values())


# --- lesson 1: at a fixed token count the scores grow in proportion to the row length ---------


def test_scores_grow_linearly_with_row_length_at_a_fixed_token_count():
    """Lesson 1 §3 and its takeaways: with N = B·T fixed, B·H·T² = N·H·T, linear in T."""
    short = score_elements_saved(LESSON_1, 32, 64)
    long = score_elements_saved(LESSON_1, 2, 1024)
    assert short > 0 and long / short == 1024 / 64  # rows 16 times as long: 16 times the scores
    assert long / short != (1024 / 64) ** 2  # the old takeaway's "quadratically more"


def test_scores_grow_with_the_square_of_the_row_length_at_a_fixed_batch():
    """Lesson 1 §3: "one row of 2,048 tokens keeps four times the scores of one row of 1,024"."""
    config = replace(LESSON_1, max_seq_len=2048, n_layers=1)
    assert score_elements_saved(config, 1, 2048) == 4 * score_elements_saved(config, 1, 1024)


def test_fused_sdpa_keeps_no_scores_and_its_math_fallback_does():
    """Lesson 1 §3: sdpa's fused kernel keeps no score matrix; PyTorch's math path does."""
    config = replace(LESSON_1, attn_impl="sdpa")
    assert score_elements_saved(config, 2, 256) == 0
    with sdpa_kernel(SDPBackend.MATH):
        assert score_elements_saved(config, 2, 256) > 0


def test_only_the_scores_and_the_causal_mask_change_between_the_extremes():
    """Lesson 1 §3: every other saved component keeps its size, except the T × T mask."""
    a = activation_bytes(LESSON_1, 32, 64)
    b = activation_bytes(LESSON_1, 2, 1024)
    same = ("attention_qkv", "mlp_hidden", "norms", "residual_stream", "logits_and_loss")
    assert all(getattr(a, name) == getattr(b, name) for name in same)
    assert b.rope_and_masks - a.rope_and_masks == 1024**2 - 64**2  # one bool mask: 1 MiB, 4 KiB
    assert b.attention_scores == 16 * a.attention_scores


# --- lesson 2: the worst length-grouped batch at 128 --------------------------------------------


def test_length_grouping_at_128_spans_580_to_1024_tokens():
    """Lesson 2 §2: "at 128 the longest batch runs from about 580 to 1,024 tokens"."""
    lengths = example_lengths(make_instruction_dataset(2000, seed=0, max_len=1024))
    batches = [lengths[i] for i in LengthGroupedSampler(lengths, 128, seed=0)]
    longest = max(batches, key=lambda b: int(b.max()))
    assert int(longest.max()) == 1024 and 570 <= int(longest.min()) <= 590


# --- lesson 4: with fused attention nothing grows faster than the tokens ------------------------

LESSON_4 = TinyGPTConfig(d_model=64, n_heads=4, n_layers=4, max_seq_len=1024, attn_impl="sdpa")


@pytest.mark.parametrize("mode", ["off", "blocks", "attention"])
def test_doubling_the_rows_at_most_doubles_an_sdpa_peak(mode):
    """Lesson 4 §2: "doubling seq_len at most doubles a peak" (the memory model, which matches
    the counted bytes; the next test measures it)."""
    config = replace(LESSON_4, checkpointing=mode)
    peaks = [activation_bytes(config, 2, t).total for t in (128, 256, 512, 1024)]
    assert all(b <= 2 * a for a, b in zip(peaks, peaks[1:])), peaks


def test_the_measured_sdpa_peaks_double_at_most_and_eager_ones_more():
    """Measured (CPU: counted bytes) at the lesson's batch of 2; eager attention is the case
    the claim must not cover: its scores grow faster than the tokens."""
    shapes = [(2, 128), (2, 256), (2, 512)]
    for impl, bound in (("sdpa", lambda a, b: b <= 2 * a), ("eager", lambda a, b: b > 2 * a)):
        rows = compare_checkpointing(
            replace(LESSON_4, attn_impl=impl), shapes, modes=("off",), seed=0
        )
        peaks = [r.measured_bytes for r in rows]
        assert all(bound(a, b) for a, b in zip(peaks, peaks[1:])), (impl, peaks)


# --- lesson 5: the plan's note says which target the largest micro-batch misses ---------------

LESSON_5 = TinyGPTConfig(d_model=64, n_heads=4, n_layers=2, max_seq_len=512)


def test_the_plans_note_names_the_steps_per_epoch_not_the_effective_batch():
    """Lesson 5 §3: 11 × 3 = 33 is inside 16-64; what it misses is 25 steps per epoch."""
    p = plan(LESSON_5, 24 * 2**20, 128, 800, min_tokens_per_step=4000)
    (note,) = p.notes
    assert (p.max_micro_batch, p.micro_batch, p.grad_accum_steps) == (11, 8, 4)
    assert "11 x 3 = 33 examples per step leave 24 full steps per epoch, fewer than 25" in note
    assert "within 16-64" not in note  # 33 is within 16-64: the old note's reason was wrong


def test_the_plans_note_names_the_range_when_no_accumulation_lands_in_it():
    p = plan(LESSON_5, 24 * 2**20, 128, 800, target_effective=(64, 64))
    (note,) = p.notes
    assert "no accumulation puts 11 x A examples per step within 64-64" in note


# --- lesson 2: a right-padded causal batch needs no mask ----------------------------------------


@pytest.mark.parametrize("attn_impl", ["eager", "sdpa"])
def test_dropping_the_mask_of_a_right_padded_causal_batch_is_exact(attn_impl):
    """Lesson 2 §4: "with right padding and a causal model ... dropping the mask is exact"."""
    torch.manual_seed(0)
    model = TinyGPT(replace(LESSON_1, attn_impl=attn_impl, max_seq_len=64))
    ids = torch.randint(3, 256, (1, 9))
    padded = torch.cat([ids, torch.zeros(1, 5, dtype=torch.long)], dim=1)  # 5 pads at the right
    with torch.no_grad():
        alone = model(input_ids=ids).logits
        unmasked = model(input_ids=padded).logits[:, :9]
        flipped = model(input_ids=padded.flip(1)).logits[:, 5:]  # left padding: the pads lead
    assert (unmasked - alone).abs().max() < 1e-5
    assert (flipped - model(input_ids=ids.flip(1)).logits).abs().max() > 1e-3  # needs a mask


# --- lesson 5: a full fp32 AdamW fine-tune keeps 16 bytes per parameter --------------------------


def test_weights_gradients_and_adamw_take_16_bytes_a_parameter():
    """Lesson 5 §1: "4 + 4 + 8 = 16 bytes per parameter in fp32, whatever the batch"."""
    from course_lib.memory import parameter_count
    from course_lib.plan import training_memory

    for rows in (1, 8):
        step = training_memory(LESSON_5, rows, 128)
        fixed = step.total - step.activations
        assert fixed == 16 * parameter_count(LESSON_5) == 4 * step.weights
