def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""

    def layernorm(width):
        return width + 2  # x, plus mean and 1/std

    def linear(width_in):
        return width_in

    attention = layernorm(d_model) + linear(d_model)  # norm, then qkv projection
    attention += 2 * d_model  # q and k saved by the score matmul
    attention += d_model      # v saved by probs @ v
    attention += linear(d_model)  # output projection
    mlp = layernorm(d_model) + linear(d_model) + d_mlp + linear(d_mlp)
    return int(attention + mlp), int(n_heads * seq_len)
