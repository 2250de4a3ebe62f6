"""TinyGPT: the loss contract, the attention paths agreeing, and clear errors on bad input."""

import pytest
import torch
import torch.nn.functional as F

from course_lib.loss import causal_lm_loss
from course_lib.masks import block_causal_mask
from course_lib.model import TinyGPT, TinyGPTConfig


def make(attn_impl="eager", **kw):
    torch.manual_seed(0)
    cfg = TinyGPTConfig(
        d_model=32, n_heads=4, n_layers=2, max_seq_len=64, attn_impl=attn_impl, **kw
    )
    return TinyGPT(cfg)


def test_loss_is_mean_over_shifted_labels():
    model = make()
    ids = torch.randint(0, 256, (2, 10))
    labels = ids.clone()
    labels[:, :4] = -100  # a prompt
    out = model(input_ids=ids, labels=labels)
    logits = out.logits[:, :-1].reshape(-1, 260)
    target = labels[:, 1:].reshape(-1)
    expected = F.cross_entropy(logits, target, ignore_index=-100)
    assert torch.allclose(out.loss, expected, atol=1e-6)
    assert out.n_loss_tokens == 2 * 6  # positions 4..9 of each row are predicted


def test_num_items_in_batch_gives_sum_over_count():
    model = make()
    ids = torch.randint(0, 256, (2, 10))
    mean = model(input_ids=ids, labels=ids).loss
    summed = model(input_ids=ids, labels=ids, num_items_in_batch=100).loss
    assert torch.allclose(summed, mean * 18 / 100, atol=1e-6)


def test_eager_and_sdpa_agree():
    ids = torch.randint(0, 256, (3, 20))
    eager = make("eager")(input_ids=ids).logits
    sdpa = make("sdpa")(input_ids=ids).logits
    assert (eager - sdpa).abs().max() < 1e-5


@pytest.mark.parametrize("attn_impl", ["eager", "sdpa"])
def test_left_padding_gives_finite_loss_and_matches_unpadded(attn_impl):
    model = make(attn_impl)
    ids = torch.randint(0, 256, (1, 8))
    plain = model(input_ids=ids).logits
    padded = torch.cat([torch.full((1, 3), 256), ids], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 8, dtype=torch.long)], 1)
    pos = (mask.cumsum(1) - 1).clamp(min=0)
    labels = padded.masked_fill(mask == 0, -100)
    out = model(input_ids=padded, attention_mask=mask, position_ids=pos, labels=labels)
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    assert (out.logits[:, 3:] - plain).abs().max() < 1e-5


@pytest.mark.parametrize("attn_impl", ["eager", "sdpa", "varlen"])
def test_packed_rows_equal_documents_run_alone(attn_impl):
    model = make(attn_impl)
    lens = [5, 9, 3]
    docs = [torch.randint(0, 256, (n,)) for n in lens]
    row = torch.cat(docs + [torch.full((3,), 256)])[None]  # (1, 20): three docs and a pad tail
    pos = torch.cat([torch.arange(n) for n in lens + [3]])[None]
    cu = torch.tensor([0, 5, 14, 17, 20], dtype=torch.int32)
    packed = model(input_ids=row, position_ids=pos, cu_seq_lens=cu).logits
    start = 0
    for doc in docs:
        alone = model(input_ids=doc[None]).logits
        assert (packed[:, start : start + len(doc)] - alone).abs().max() < 1e-5
        start += len(doc)


def test_packed_row_without_boundaries_leaks():
    model = make("sdpa")
    a, b = torch.randint(0, 256, (6,)), torch.randint(0, 256, (6,))
    row = torch.cat([a, b])[None]
    pos = torch.cat([torch.arange(6), torch.arange(6)])[None]
    careless = model(input_ids=row, position_ids=pos).logits[:, 6:]
    alone = model(input_ids=b[None]).logits
    assert (careless - alone).abs().max() > 1e-3


def test_block_causal_mask_never_crosses_documents():
    seg = torch.tensor([[0, 0, 1, 1, 1, 2]])
    allowed = block_causal_mask(seg)[0, 0] == 0
    for q in range(6):
        for k in range(6):
            assert bool(allowed[q, k]) == (k <= q and seg[0, q] == seg[0, k])


@pytest.mark.parametrize("mode", [True, "attention"])
def test_checkpointing_gives_identical_gradients(mode):
    ids = torch.randint(0, 256, (2, 16))
    grads = []
    for ckpt in (False, mode):
        model = make("eager", checkpointing=ckpt)
        model(input_ids=ids, labels=ids).loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"input_ids": torch.zeros(2, 65, dtype=torch.long)}, "longer than max_seq_len=64"),
        ({"input_ids": torch.full((1, 4), 300)}, "token ids must be in"),
        ({"input_ids": torch.zeros(1, 4)}, "integer token ids"),
        ({"input_ids": torch.zeros(4, dtype=torch.long)}, "2-D tensor"),
        ({"input_ids": torch.zeros(0, 4, dtype=torch.long)}, "empty"),
        (
            {
                "input_ids": torch.zeros(2, 4, dtype=torch.long),
                "labels": torch.zeros(2, 5, dtype=torch.long),
            },
            "labels has shape",
        ),
        (
            {"input_ids": torch.zeros(1, 4, dtype=torch.long), "labels": torch.full((1, 4), -100)},
            "no label token",
        ),
        (
            {
                "input_ids": torch.zeros(1, 4, dtype=torch.long),
                "cu_seq_lens": torch.tensor([0, 3], dtype=torch.int32),
            },
            "cu_seq_lens",
        ),
    ],
)
def test_bad_input_names_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make()(**kwargs)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"d_model": 30, "n_heads": 4}, "not divisible"),
        ({"n_layers": 0}, "n_layers must be a positive int"),
        ({"attn_impl": "flash"}, "attn_impl='flash'"),
        ({"checkpointing": "sometimes"}, "checkpointing="),
    ],
)
def test_bad_config_names_the_problem(kw, message):
    with pytest.raises(ValueError, match=message):
        TinyGPTConfig(**kw)


def test_loss_with_no_label_and_a_count_is_zero_not_nan():
    logits = torch.randn(1, 4, 260, requires_grad=True)
    loss, n = causal_lm_loss(logits, torch.full((1, 4), -100), num_items_in_batch=10)
    assert n == 0 and float(loss.detach()) == 0.0
