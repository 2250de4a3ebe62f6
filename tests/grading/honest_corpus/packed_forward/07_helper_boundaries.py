import torch


def _boundaries(position_ids):
    """Offsets of every document in the flattened stream, and the stream's length."""
    flat = position_ids.reshape(-1)
    is_start = flat.eq(0)
    return torch.nonzero(is_start).squeeze(1), flat.numel()


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    starts, length = _boundaries(batch["position_ids"])
    cu_seq_lens = torch.empty(starts.numel() + 1, dtype=torch.int32, device=starts.device)
    cu_seq_lens[:-1] = starts
    cu_seq_lens[-1] = length
    return model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                 cu_seq_lens=cu_seq_lens)
