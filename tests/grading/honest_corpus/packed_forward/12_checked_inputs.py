import torch


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    input_ids = batch["input_ids"]
    position_ids = batch["position_ids"]
    if input_ids.shape != position_ids.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and position_ids "
                         f"{tuple(position_ids.shape)} differ")
    if (position_ids[:, 0] != 0).any():
        raise ValueError("every row must start a document (position 0)")
    stream = position_ids.flatten()
    doc_starts = (stream == 0).nonzero().view(-1)
    end = torch.full((1,), stream.shape[0], dtype=doc_starts.dtype, device=doc_starts.device)
    cu_seq_lens = torch.cat([doc_starts, end]).to(torch.int32)
    return model(input_ids=input_ids, position_ids=position_ids, cu_seq_lens=cu_seq_lens)
