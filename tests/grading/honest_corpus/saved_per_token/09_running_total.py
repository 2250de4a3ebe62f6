def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""
    other = 0
    # x -> ln_1: LayerNorm saves its input and (mean, rstd)
    other += d_model + 2
    # ln_1(x) -> qkv Linear: saves its input
    other += d_model
    # q @ k^T: saves both operands
    other += d_model + d_model
    # softmax: saves its output, the (T x T) probabilities per head -> seq_len per token per head
    scores = n_heads * seq_len
    # probs @ v: saves probs (already counted) and v
    other += d_model
    # output projection Linear
    other += d_model
    # residual add: nothing. ln_2 saves input + stats
    other += d_model + 2
    # MLP: up Linear input, GELU input (= up output), down Linear input (= GELU output)
    other += d_model
    other += d_mlp
    other += d_mlp
    return other, scores
