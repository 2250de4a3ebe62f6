"""Gradient noise (course_lib.noise): the quadratic form is the step's squared error, the noise
falls with the step's size, and the summary says what lesson 3 prints."""

import pytest
import torch
from helpers import tiny_model

from course_lib.data import make_instruction_dataset
from course_lib.noise import example_gradients, gradient_noise

pytestmark = pytest.mark.usefixtures("one_thread")

POOL = make_instruction_dataset(24, seed=5, max_len=96)


def test_a_steps_error_is_the_quadratic_form_in_the_gram_matrix():
    model = tiny_model(max_seq_len=96)
    s = example_gradients(model, POOL[:6])
    n = torch.tensor([len(ex["input_ids"]) - ex["prompt_len"] for ex in POOL[:6]],
                     dtype=torch.float64)  # fmt: skip
    g_star = s.sum(0) / n.sum()
    d = s - n[:, None] * g_star
    c = torch.tensor([2.0, 0, 1, 0, 0, 3], dtype=torch.float64)  # how often each is drawn
    direct = float(((c @ s) / (c @ n) - g_star).norm() ** 2)
    assert float((c @ (d @ d.T) @ c) / (c @ n) ** 2) == pytest.approx(direct, rel=1e-9)
    assert all(p.grad is None for p in model.parameters())


def test_noise_falls_with_the_step_and_the_summary_reads_it():
    noise = gradient_noise(tiny_model(max_seq_len=96), POOL, ks=(1, 4, 16), draws=100, seed=0)
    for group in ("short", "long", "all"):
        assert noise.noise[group][0] > noise.noise[group][1] > noise.noise[group][2] > 0
    assert noise.tokens_per_example["short"] < noise.tokens_per_example["long"]
    assert noise.noise_to_signal == noise.one_example_noise["all"] / noise.signal["all"]
    lines = noise.summary(tokens=(900,)).splitlines()
    assert "short examples are" in lines[0] and lines[1].startswith("   900 loss tokens per step")


def test_too_small_a_pool_is_refused():
    with pytest.raises(ValueError, match="at least 2 examples with a completion"):
        gradient_noise(tiny_model(max_seq_len=96), POOL[:1])
