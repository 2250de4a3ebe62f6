def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""
    C = d_model
    # attention half
    norm1 = C + 2          # LayerNorm input + mean + rstd
    qkv = C                # Linear keeps its input (the normed x)
    q_and_k = 2 * C        # the q @ k.T matmul keeps q and k
    probs = n_heads * seq_len  # softmax output, per query token per head
    values = C             # att @ v keeps v (att is the softmax output, counted)
    out_proj = C           # proj Linear input
    norm2 = C + 2
    fc_in = C
    gelu = d_mlp
    fc_out = d_mlp
    other = norm1 + qkv + q_and_k + values + out_proj + norm2 + fc_in + gelu + fc_out
    return other, probs
