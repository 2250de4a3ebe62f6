import torch


def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""
    per_token = torch.tensor([
        d_model + 2,   # ln1
        3 * d_model,   # qkv input, then q and k
        2 * d_model,   # v and the proj input
        d_model + 2,   # ln2
        d_model,       # fc1 input
        2 * d_mlp,     # gelu input and fc2 input
    ])
    return int(per_token.sum().item()), n_heads * seq_len
