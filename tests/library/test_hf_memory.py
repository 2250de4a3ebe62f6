"""predict_hf_step against the meter on tiny random copies of each family (optional hf extra).

Every family (Llama with one key/value head, Mistral and Qwen2 with grouped-query attention,
GPT-2; tied and untied embeddings) in fp32 and bf16, eager and sdpa, full and LoRA, with and
without checkpointing, over 16 shapes per family: the prediction must equal the CPU's counted
bytes on the stack it was read from (within 3% on another). A failure names the installed
versions and, component by component, which saved tensors moved.
"""

from __future__ import annotations

import importlib.util
import itertools
import re

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (optional extra: pip install -e '.[hf]')"
)

from course_lib.hf.arch import architecture, lora_parameter_count  # noqa: E402
from course_lib.hf.ops import Ops  # noqa: E402
from course_lib.hf.predict import CHECKED_WITH  # noqa: E402
from course_lib.memory import HFStepBreakdown, attention_elements, predict_hf_step  # noqa: E402
from course_lib.memory.hf_check import (  # noqa: E402
    build_model,
    compare_hf,
    saved_by_module,
    tiny_hf_config,
)

TOLERANCE = 0.03
HAS_PEFT = importlib.util.find_spec("peft") is not None
SHAPES = [(1, 8), (2, 16), (1, 33), (3, 24), (4, 12), (2, 40), (1, 64), (5, 20),
          (2, 57), (3, 9), (1, 96), (4, 31), (6, 10), (2, 75), (3, 50), (1, 128)]  # fmt: skip
DTYPES, ATTENTION, LORA, CHECKPOINTING = (
    ("float32", "bfloat16"),
    ("eager", "sdpa"),
    (None, 4),
    ("off", "blocks"),
)
VARIANTS = list(itertools.product(DTYPES, ATTENTION, LORA, CHECKPOINTING))
ORIGINAL = ("llama", "mistral", "qwen2", "gpt2")
NEW_FAMILIES = ("qwen3", "gemma2", "gemma3_text", "phi3", "olmo2", "mixtral")
# The newer families: six settings each (the original four run all sixteen).
FEW = [("float32", "sdpa", None, "off"), ("bfloat16", "sdpa", None, "off"),
       ("bfloat16", "eager", None, "off"), ("bfloat16", "sdpa", 4, "blocks"),
       ("float32", "eager", 4, "blocks"), ("bfloat16", "sdpa", 4, "off")]  # fmt: skip
# On the stack the recipes were read from the prediction is the counted bytes, to the byte;
# elsewhere (another transformers or torch) within TOLERANCE, and the failure says what moved.
EXACT = transformers.__version__ == "5.24.0" and torch.__version__.startswith("2.13.")
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # peft 0.21 asks transformers 5 for a renamed flag when LoRA meets checkpointing
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]


def variant_id(v) -> str:
    dtype, attn, lora, ckpt = v
    return f"{dtype}-{attn}-{'lora' if lora else 'full'}-{'ckpt' if ckpt == 'blocks' else 'off'}"


def component_of(module: str) -> str:
    """The breakdown component of a module's tensors (as ``course_lib.hf.models`` names it)."""
    parts = module.split(".")
    if module.endswith(":input"):
        return "checkpointed inputs"
    if parts[-1].endswith("norm") or any(p.startswith("ln_") for p in parts):
        return "norms"
    if "mlp" in parts:
        return "mlp"
    if "self_attn" in parts or "attn" in parts or "rotary_emb" in parts:
        return "attention"  # (eager's scores are part of it here)
    if parts[-1].isdigit():
        return "residual"
    if module == "" or "lm_head" in parts:
        return "logits_and_loss"
    return "embeddings"  # embed_tokens, wte, wpe, and the base model's own position ids


def explain(row, config, lora, ckpt) -> str:
    """Why a comparison failed: versions, the peaks, and saved bytes component by component."""
    model = build_model(
        config, dtype=getattr(torch, row.dtype), attn_impl=row.attn_impl,
        lora_rank=lora, checkpointing=ckpt,
    )  # fmt: skip
    ids = torch.randint(config.vocab_size, (row.batch_size, row.seq_len))
    measured: dict[str, int] = {}
    for module, n in saved_by_module(model, {"input_ids": ids, "labels": ids}).items():
        measured[component_of(module)] = measured.get(component_of(module), 0) + n
    p = predict_hf_step(
        config, row.batch_size, row.seq_len, attn_impl=row.attn_impl, dtype=row.dtype,
        lora_rank=lora, checkpointing=ckpt,
    )  # fmt: skip
    predicted = dict(p.saved)
    predicted["attention"] = predicted.get("attention", 0) + predicted.pop("attention_scores", 0)
    moved = {
        c: (predicted.get(c, 0), measured.get(c, 0))
        for c in sorted(set(predicted) | set(measured))
        if predicted.get(c, 0) != measured.get(c, 0)
    }
    versions = f"transformers {transformers.__version__}, torch {torch.__version__}"
    return (
        f"{row.model_type} {row.label} at {row.batch_size}x{row.seq_len}: predicted "
        f"{row.predicted:,} B (peak at {row.peak_at}), measured {row.measured:,} B "
        f"({row.error:+.2%}); installed {versions}, recipes read from {CHECKED_WITH}. "
        f"Saved for backward, predicted vs measured, where they differ (the op that moved): "
        f"{moved or 'none: the change is in the backward pass'}"
    )


CASES = [(f, v) for f in ORIGINAL for v in VARIANTS] + [
    (f, v if f != "gemma2" else (v[0], "eager", *v[2:])) for f in NEW_FAMILIES for v in FEW
]


@pytest.mark.parametrize(("model_type", "variant"), CASES,
                         ids=[f"{f}-{variant_id(v)}" for f, v in CASES])  # fmt: skip
def test_prediction_matches_the_meter(model_type, variant):
    dtype, attn_impl, lora, ckpt = variant
    if lora and not HAS_PEFT:
        pytest.skip("peft is not installed (hf extra): the LoRA comparisons need it")
    k = VARIANTS.index(variant) if variant in VARIANTS else 0
    shapes = [SHAPES[k], SHAPES[(k + 8) % len(SHAPES)]]  # every family sees all 16 shapes
    config = tiny_hf_config(model_type)
    targets = "all-linear" if model_type in NEW_FAMILIES else None
    rows = compare_hf(
        config, shapes, dtype=getattr(torch, dtype), attn_impl=attn_impl,
        lora_rank=lora, checkpointing=ckpt, **({"lora_targets": targets} if lora else {}),
    )  # fmt: skip
    for row in rows:
        assert row.method == "CPU: counted bytes"
        if row.predicted != row.measured if EXACT else abs(row.error) > TOLERANCE:
            pytest.fail(explain(row, config, lora, ckpt))


def plant_one_tensor_per_layer(monkeypatch):
    """A wrong model: every layer's input norm keeps one more hidden-size tensor."""
    rmsnorm = Ops.rmsnorm

    def planted(self, where, comp, x, C, pid, trainable, **kw):
        out = rmsnorm(self, where, comp, x, C, pid, trainable, **kw)
        if where.endswith("input_layernorm"):
            self.tape.op(where, comp, [out], [self.N * C * self.b], ("out",), [])
        return out

    monkeypatch.setattr(Ops, "rmsnorm", planted)


def test_a_planted_error_of_one_tensor_per_layer_fails(monkeypatch):
    # Shapes where activations make the peak (below ~64 tokens the weights' gradients do, and
    # one more activation per layer is gone by then).
    config = tiny_hf_config("mistral")
    shapes = [(1, 64), (4, 31), (2, 75), (3, 50)]
    kw = dict(dtype=torch.bfloat16, attn_impl="sdpa")
    assert all(abs(r.error) <= TOLERANCE for r in compare_hf(config, shapes, **kw))
    import course_lib.hf.scaling as scaling

    plant_one_tensor_per_layer(monkeypatch)
    scaling.step_line.cache_clear()  # the step read off short models is cached per spec
    try:
        planted = compare_hf(config, shapes, **kw)
    finally:
        scaling.step_line.cache_clear()
    assert all(r.error > TOLERANCE for r in planted), [f"{r.error:+.2%}" for r in planted]
    assert "op that moved" in explain(planted[0], config, None, "off")


def test_breakdown_adds_up_and_names_the_peak():
    config = tiny_hf_config("qwen2")
    p = predict_hf_step(config, 2, 32, dtype="bf16", attn_impl="eager")
    assert isinstance(p, HFStepBreakdown)
    assert sum(p.components().values()) == p.total > 0
    assert p.saved["attention_scores"] > 0 and p.peak_at
    assert p.forward_peak <= p.total
    sdpa = predict_hf_step(config.to_dict(), 2, 32, dtype=torch.bfloat16)  # a dict works too
    assert "attention_scores" not in sdpa.saved and sdpa.total < p.total


def test_checkpointing_keeps_less_and_lora_makes_fewer_gradients():
    config = tiny_hf_config("llama", num_hidden_layers=4, vocab_size=64)
    plain = predict_hf_step(config, 1, 16, dtype="bf16")
    ckpt = predict_hf_step(config, 1, 16, dtype="bf16", checkpointing=True)
    lora = predict_hf_step(config, 1, 16, dtype="bf16", lora_rank=8)
    assert ckpt.saved_total < plain.saved_total / 2
    # One short row: the weights' gradients make the peak, and recomputation only adds to it.
    assert plain.gradients > plain.activations and ckpt.total > plain.total
    adapters = lora_parameter_count(architecture(config), 8) * 4  # fp32
    assert lora.gradients <= adapters < plain.gradients
    long = [
        predict_hf_step(config, 4, 128, dtype="bf16", checkpointing=c).total for c in (False, True)
    ]
    assert long[1] < long[0] / 2


def test_score_elements_of_the_worked_example():
    # 2 rows of 8,192 tokens, 32 heads: 4.3e9 score elements per layer (attention_elements).
    from course_lib.hf_configs import load_config

    llama = load_config("Llama-3.1-8B")
    elements = attention_elements(2, 32, 8192)
    assert elements == 4_294_967_296
    for dtype, per_element in (("float32", 4), ("bfloat16", 4 + 2)):  # fp32 softmax + bf16 copy
        p = predict_hf_step(llama, 2, 8192, attn_impl="eager", dtype=dtype, checkpointing=True)
        assert p.saved.get("attention_scores", 0) == 0  # checkpointed: recomputed, not kept
        p = predict_hf_step(llama, 2, 8192, attn_impl="eager", dtype=dtype)
        assert p.saved["attention_scores"] == 32 * elements * per_element


def gpt2_layer_saved(act: str, s: int, b: int) -> int:
    """Bytes one GPT-2 layer keeps for backward in bf16, eager attention (a difference of two
    depths, so nothing outside the layers counts)."""
    saved = []
    for layers in (2, 3):
        config = tiny_hf_config(
            "gpt2", n_embd=128, n_head=4, n_layer=layers, activation_function=act
        )
        saved.append(predict_hf_step(config, b, s, attn_impl="eager", dtype="bf16").saved_total)
    return saved[1] - saved[0]


def test_korthikanti_per_layer_activations_without_dropout():
    # Korthikanti et al. 2022: s*b*h*(34 + 5*a*s/h) bytes per layer in 16-bit, with dropout.
    # Without dropout: no masks (sbh + a*s^2*b) and no dropped copy of the probabilities
    # (2*a*s^2*b): 32*s*b*h + 2*a*s^2*b. GPT-2 with a fused GELU keeps exactly that, plus
    # LayerNorm's mean and rstd (2 per token, bf16 on the CPU, for each of the 2 norms).
    s, b, h, a = 48, 2, 128, 4
    formula = 32 * s * b * h + 2 * a * s * s * b
    assert gpt2_layer_saved("gelu_pytorch_tanh", s, b) == formula + 2 * 2 * 2 * s * b
    # HF's GPT-2 default, gelu_new, is eight ops keeping three more (s, b, 4h) tensors.
    assert gpt2_layer_saved("gelu_new", s, b) == formula + 8 * s * b + 3 * 2 * s * b * 4 * h


@pytest.mark.parametrize(
    "config, kwargs, message",
    [
        ({"model_type": "gemma"}, {}, "model_type 'gemma' is not supported; supported: llama"),
        ({"model_type": "gemma"}, {}, "nearest supported: gemma2"),
        ({"model_type": "qwen3_moe"}, {}, "nearest supported: mixtral"),
        ({"model_type": "smollm3"}, {}, "SmolLM2, TinyLlama"),
        ("mistral", {"seq_len": 32}, "sliding-window attention over 32 tokens with seq_len=32"),
        (None, {"lora_rank": 4, "lora_targets": ["wq"]}, "lora_targets ['wq'] are not"),
        (None, {"weights": "nf4"}, "a quantised model trains adapters only"),
        (None, {"loop": "eager"}, "loop='eager' is not one of"),
        (None, {"batch_size": 0}, "batch_size must be a positive int"),
        (None, {"seq_len": -1}, "seq_len must be a positive int"),
        (None, {"attn_impl": "flashy"}, "attn_impl='flashy' is not one of"),
        (None, {"dtype": "int8"}, "dtype='int8' is not one of float32, bfloat16, float16"),
        (None, {"lora_rank": 0}, "lora_rank must be a positive int"),
        (None, {"checkpointing": "attention"}, "checkpoint whole decoder layers"),
        (None, {"checkpointing": "some"}, "checkpointing='some' is not one of"),
        ({"model_type": "llama", "hidden_size": 8}, {}, "has no field 'num_attention_heads'"),
        ("gpt2", {"seq_len": 300}, "exceeds GPT-2's n_positions=256"),
        ("mistral", {"seq_len": 64}, "sliding-window attention over 32 tokens"),
        ("gemma2", {"attn_impl": "sdpa"}, "soft-caps its attention scores"),
        ("llama", {"config": 3}, "config must be a transformers config or a dict"),
    ],
)
def test_bad_input_is_a_clear_value_error(config, kwargs, message):
    if config is None or isinstance(config, str):
        config = tiny_hf_config(config or "llama")
        if config.model_type == "mistral":
            config.sliding_window = 32
    args = {"config": config, "batch_size": 2, "seq_len": 16, **kwargs}
    with pytest.raises(ValueError, match=re.escape(message)):
        predict_hf_step(args.pop("config"), args.pop("batch_size"), args.pop("seq_len"), **args)
