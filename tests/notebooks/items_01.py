"""What tests/notebooks/test_assessment.py tries against lesson 01's autograded items."""

from assessment import Item

ITEMS: dict[str, Item] = {
    "predict-ratio": Item(
        wrong=[
            "predicted_ratio = 4",  # the ratio of the row lengths squared over the batches, halved
            "predicted_ratio = 256",  # seq_len² alone, forgetting the batch sizes
            "predicted_ratio = 16.5",  # close, but not the exact factor at 3 significant figures
        ],
        library=(
            "from course_lib.memory import attention_elements as ae\n"
            "predicted_ratio = ae(2, 4, 1024) / ae(32, 4, 64)"
        ),
        constants=["predicted_ratio"],
        # 16 is printed above as the worked example's batch size (16 × 1024, 16,384 tokens),
        # not as this question's answer about 32 × 64 against 2 × 1024.
        allowed=["16"],
    ),
    "saved-per-token": Item(
        wrong=[
            # forgets LayerNorm's statistics
            "def saved_per_token(d_model, d_mlp, n_heads, seq_len):\n"
            "    return (8 * d_model + 2 * d_mlp, n_heads * seq_len)",
            # counts the probabilities twice (softmax and att @ v)
            "def saved_per_token(d_model, d_mlp, n_heads, seq_len):\n"
            "    return (8 * d_model + 2 * d_mlp + 4, 2 * n_heads * seq_len)",
            # counts the weights as activations and the scores per row, not per token
            "def saved_per_token(d_model, d_mlp, n_heads, seq_len):\n"
            "    return (6 * d_model + 2 * d_mlp + 4, n_heads * seq_len * seq_len)",
        ],
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
    ),
    "real-scale": Item(
        wrong=[
            # fp32 instead of bf16
            "scores_gb_per_layer = 17.2\nscores_gb_all_layers = 550\nfused_mb_per_layer = 2.1",
            # GiB instead of GB
            "scores_gb_per_layer = 8.0\nscores_gb_all_layers = 256\nfused_mb_per_layer = 2.0",
            # the fused statistics in bf16
            "scores_gb_per_layer = 8.6\nscores_gb_all_layers = 275\nfused_mb_per_layer = 1.05",
            # one layer's scores taken for the whole model
            "scores_gb_per_layer = 8.59\nscores_gb_all_layers = 8.59\nfused_mb_per_layer = 2.1",
        ],
        library=(
            "from course_lib.memory import attention_elements\n"
            "scores_gb_per_layer = attention_elements(2, 32, 8192) * 2 / 1e9\n"
            "scores_gb_all_layers = 32 * scores_gb_per_layer\n"
            "fused_mb_per_layer = 2 * 32 * 8192 * 4 / 1e6"
        ),
        constants=["scores_gb_per_layer", "scores_gb_all_layers", "fused_mb_per_layer"],
    ),
    "target-practice": Item(
        wrong=[
            "target_batch_size = 8\ntarget_seq_len = 512",  # measured above 100 MiB
            "target_batch_size = 32\ntarget_seq_len = 128",  # fits, but not the longest rows
        ],
        library=(
            "from course_lib.memory import activation_bytes\n"
            "from course_lib.lessons.attention import split_seq_lens\n"
            "target_seq_len = max(t for t in split_seq_lens(4096, 1024)\n"
            "                     if activation_bytes(config, 4096 // t, t).total <= 100 * 2**20)\n"
            "target_batch_size = 4096 // target_seq_len"
        ),
        constants=["target_batch_size", "target_seq_len"],
        # 16 and 256 are printed above as shapes and sizes of the lesson's model (16 × 1024 in the
        # worked example, 8 × 256 in the 2,048-token sweep, d_mlp = 256), not as this answer.
        allowed=["16", "256"],
    ),
    "q1": Item(
        wrong=[
            'q1_cheaper = "2x8192"\nq1_ratio = 4',  # the wrong shape
            'q1_cheaper = "8x2048"\nq1_ratio = 16',  # seq² alone, forgetting the batch sizes
            'q1_cheaper = "8x2048"\nq1_ratio = 2',  # linear in seq_len
        ],
        library=(
            "from course_lib.memory import attention_elements\n"
            'q1_cheaper = "8x2048"\n'
            "q1_ratio = attention_elements(2, 32, 8192) / attention_elements(8, 32, 2048)"
        ),
        constants=["q1_cheaper", "q1_ratio"],
    ),
}
