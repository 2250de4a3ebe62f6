import numpy as np
import torch


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    pos = batch["position_ids"].detach().cpu().numpy().ravel()
    starts = np.flatnonzero(pos == 0)
    cu = np.concatenate([starts, [pos.size]]).astype(np.int32)
    cu_seq_lens = torch.from_numpy(cu).to(batch["input_ids"].device)
    return model(
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        cu_seq_lens=cu_seq_lens,
    )
