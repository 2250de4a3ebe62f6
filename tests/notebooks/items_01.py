"""What tests/notebooks/test_assessment.py tries against lesson 01's autograded items.

Wrong answers and wrong methods are listed by name; the right answer's other forms and the
shortcuts are built by the pass from the registration, the solution and the library call.
"""

from assessment import Item

# Where a graded answer's printed form is unavoidable and says nothing about the answer.
_SPLITS = {
    "16 × 1024": "the worked example's short shape (16 sequences of 1,024): a batch size",
    "16x1024": "the worked example's short shape, as the introduction writes a shape answer",
    "16 × 128": "a row of the measured 2,048-token sweep (16 rows of 128 tokens)",
    "8 × 256": "a row of the measured 2,048-token sweep (8 rows of 256 tokens)",
    "4 × 512": "a row of the measured 2,048-token sweep (4 rows of 512 tokens)",
    "from 16 to 1,024": "target practice's question: the row lengths it offers",
}


def _per_token(other: str, scores: str) -> str:
    return (
        f"def saved_per_token(d_model, d_mlp, n_heads, seq_len):\n    return ({other}, {scores})\n"
    )


ITEMS: dict[str, Item] = {
    "predict-ratio": Item(
        wrong={  # outside the rule (above 1): 0
            "the token ratio (both shapes hold 2,048 tokens)": "predicted_ratio = 1",
            "inverted: 32 × 64 over 2 × 1024": "predicted_ratio = 1 / 16",
        },
        plausible={  # wrong, but above 1: the completion point, as the right 16 earns
            "seq_len squared alone, forgetting the batch sizes": "predicted_ratio = 256",
            "close, but not the exact factor": "predicted_ratio = 16.04",
            "the square root of the factor": "predicted_ratio = 4",
        },
        library=(
            "from course_lib.memory import attention_elements as ae\n"
            "predicted_ratio = ae(2, 4, 1024) / ae(32, 4, 64)"
        ),
        shown=_SPLITS,
    ),
    "saved-per-token": Item(
        grader="_library_pair",
        wrong={
            "forgets LayerNorm's statistics": _per_token(
                "8 * d_model + 2 * d_mlp", "n_heads * seq_len"
            ),
            "counts the probabilities twice (softmax and att @ v)": _per_token(
                "8 * d_model + 2 * d_mlp + 4", "2 * n_heads * seq_len"
            ),
            "counts the scores per row, not per token": _per_token(
                "8 * d_model + 2 * d_mlp + 4", "n_heads * seq_len * seq_len"
            ),
            "forgets that q @ k^T keeps q and k": _per_token(
                "6 * d_model + 2 * d_mlp + 4", "n_heads * seq_len"
            ),
            "counts the MLP's hidden values three times": _per_token(
                "8 * d_model + 3 * d_mlp + 4", "n_heads * seq_len"
            ),
            "the lesson's block as a constant": _per_token("1028", "n_heads * seq_len"),
        },
        library=(
            "from dataclasses import replace\n"
            "from course_lib.memory import activation_bytes\n"
            "from course_lib.model import TinyGPTConfig\n"
            "def saved_per_token(d_model, d_mlp, n_heads, seq_len):\n"
            "    one = TinyGPTConfig(d_model=d_model, n_heads=n_heads, n_layers=1,\n"
            "                        max_seq_len=seq_len, mlp_ratio=d_mlp // d_model)\n"
            "    a, b = activation_bytes(one, 1, seq_len), activation_bytes(replace(one, n_layers=2), 1, seq_len)\n"
            "    scores = (b.attention_scores - a.attention_scores) // (4 * seq_len)\n"
            "    return ((b.saved_total - a.saved_total) // (4 * seq_len) - scores, scores)"
        ),
        shown=_SPLITS,
    ),
    "real-scale": Item(
        wrong={
            "fp32 instead of bf16": "scores_gb_per_layer = 17.2\nscores_gb_all_layers = 550\nfused_mb_per_layer = 2.1",
            "GiB instead of GB": "scores_gb_per_layer = 8.0\nscores_gb_all_layers = 256\nfused_mb_per_layer = 2.0",
            "the fused statistics in bf16": "scores_gb_per_layer = 8.59\nscores_gb_all_layers = 275\nfused_mb_per_layer = 1.05",
            "one layer's scores taken for the whole model": "scores_gb_per_layer = 8.59\nscores_gb_all_layers = 8.59\nfused_mb_per_layer = 2.1",
            "the per-layer figure to 2 significant figures only": "scores_gb_per_layer = 8.6\nscores_gb_all_layers = 275\nfused_mb_per_layer = 2.1",
        },
        library=(
            "from course_lib.memory import attention_elements\n"
            "scores_gb_per_layer = attention_elements(2, 32, 8192) * 2 / 1e9\n"
            "scores_gb_all_layers = 32 * scores_gb_per_layer\n"
            "fused_mb_per_layer = 2 * 32 * 8192 * 4 / 1e6"
        ),
    ),
    "target-practice": Item(
        wrong={
            "measured above 100 MiB": "target_batch_size = 8\ntarget_seq_len = 512",
            "fits, but not the longest rows": "target_batch_size = 32\ntarget_seq_len = 128",
            "rows and batch swapped": "target_batch_size = 256\ntarget_seq_len = 16",
        },
        library=(
            "from course_lib.memory import activation_bytes\n"
            "from course_lib.lessons.attention import split_seq_lens\n"
            "target_seq_len = max(t for t in split_seq_lens(4096, 1024)\n"
            "                     if activation_bytes(config, 4096 // t, t).total <= 100 * 2**20)\n"
            "target_batch_size = 4096 // target_seq_len"
        ),
        shown=_SPLITS,
    ),
    "q1": Item(
        wrong={
            "the wrong shape": 'q1_cheaper = "2x8192"\nq1_ratio = 4',
            "seq_len squared alone, forgetting the batch sizes": 'q1_cheaper = "8x2048"\nq1_ratio = 16',
            "linear in seq_len": 'q1_cheaper = "8x2048"\nq1_ratio = 2',
            "the inverse factor": 'q1_cheaper = "8x2048"\nq1_ratio = 0.25',
        },
        library=(
            "from course_lib.memory import attention_elements\n"
            'q1_cheaper = "8x2048"\n'
            "q1_ratio = attention_elements(2, 32, 8192) / attention_elements(8, 32, 2048)"
        ),
        shown={
            "8 × 2048  -> 16,384 tokens per step": (
                "section 1's table lists all three shapes of the worked example, not which is cheaper"
            ),
            "They propose `8 × 2048`": (
                "question 2 (written) proposes the shorter rows: that they cost less is the "
                "lesson's thesis; question 1's point needs the exact factor as well"
            ),
        },
    ),
}
