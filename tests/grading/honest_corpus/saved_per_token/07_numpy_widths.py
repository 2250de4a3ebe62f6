import numpy as np


def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""
    widths = np.array([d_model, 2, d_model, d_model, d_model, d_model, d_model,
                       d_model, 2, d_model, d_mlp, d_mlp])
    return int(widths.sum()), int(n_heads * seq_len)
