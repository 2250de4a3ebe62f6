"""What tests/notebooks/test_assessment.py tries against lesson 02's autograded items.

Wrong answers and wrong methods are listed by name; the right answer's other forms and the
shortcuts are built by the pass from the registration, the solution and the library call.
"""

from assessment import Item


def _row(body: str) -> str:
    return (
        "import torch\n"
        "def packed_row(lengths, capacity):\n"
        "    if any(n <= 0 for n in lengths) or sum(lengths) > capacity:\n"
        "        raise ValueError('bad lengths')\n"
        "    segs = list(lengths) + ([capacity - sum(lengths)] if sum(lengths) < capacity else [])\n"
        "    seg = torch.tensor([d for d, n in enumerate(segs) for _ in range(n)])\n"
        "    causal = torch.ones(capacity, capacity, dtype=torch.bool).tril()\n"
        f"{body}"
    )


def _forward(body: str) -> str:
    return (
        "import torch\n"
        "def packed_forward(model, batch):\n"
        "    positions = batch['position_ids']\n"
        "    rows, width = positions.shape\n"
        f"{body}"
        "    return model(input_ids=batch['input_ids'], position_ids=positions, cu_seq_lens=cu)\n"
    )


ITEMS: dict[str, Item] = {
    "predict-waste": Item(
        wrong={  # outside the rule (a share from 0 up to 1): 0
            "slots per real token instead of a share": "predicted_waste = 4000 / 1460",
            "the mean of the rows' padding shares, as a percentage": "predicted_waste = 63.5",
        },
        plausible={  # wrong, but a share: the completion point, as the right 0.635 earns
            "the share of real tokens, not of padding": "predicted_waste = 0.365",
            "padded to the mean length, not the longest": (
                "predicted_waste = 1 - (120 + 250 + 90 + 1000) / (4 * 365)"
            ),
            "only the three short rows counted": (
                "predicted_waste = 1 - (120 + 250 + 90) / (3 * 1000)"
            ),
        },
        library="predicted_waste = padding_stats([[120, 250, 90, 1000]]).waste_fraction",
    ),
    "target-batch": Item(
        wrong={
            "the first batch size that wastes more than half": "target_batch_size = 5",
            "the slider's start": "target_batch_size = 8",
            "one batch size too small": "target_batch_size = 3",
        },
        library=(
            "target_batch_size = max(b for b in range(1, 65) if padding_stats(\n"
            "    [lengths[i].tolist() for i in random_batches(len(lengths), b, seed=seed)]\n"
            ").waste_fraction < 0.5)"
        ),
    ),
    "position-ids": Item(
        grader="_reference_row",
        wrong={
            "positions never reset, a plain causal mask": _row(
                "    return list(range(capacity)), causal\n"
            ),
            "the block mask without its causal part": _row(
                "    pos = [p for n in segs for p in range(n)]\n"
                "    return pos, seg[:, None] == seg[None, :]\n"
            ),
            "the padding tail counted on from the last document": _row(
                "    pos = [p for n in lengths for p in range(n)]\n"
                "    pos += list(range(pos[-1] + 1, pos[-1] + 1 + capacity - sum(lengths)))\n"
                "    return pos, (seg[:, None] == seg[None, :]) & causal\n"
            ),
            "the padding tail merged into the last document": _row(
                "    seg = torch.tensor([d for d, n in enumerate(lengths) for _ in range(n)]\n"
                "                       + [len(lengths) - 1] * (capacity - sum(lengths)))\n"
                "    pos = [p for n in segs for p in range(n)]\n"
                "    return pos, (seg[:, None] == seg[None, :]) & causal\n"
            ),
        },
        forms={
            "positions as a 1-D int tensor, the mask as a numpy array": (
                "import numpy as np\nimport torch\n"
                "def packed_row(lengths, capacity):\n"
                "    if any(n <= 0 for n in lengths) or sum(lengths) > capacity:\n"
                "        raise ValueError(f'lengths {lengths} do not fit in {capacity}')\n"
                "    segs = list(lengths) + [capacity - sum(lengths)] * (sum(lengths) < capacity)\n"
                "    seg = np.repeat(np.arange(len(segs)), segs)\n"
                "    pos = torch.tensor([p for n in segs for p in range(n)])\n"
                "    allowed = (seg[:, None] == seg[None, :]) & np.tri(capacity, dtype=bool)\n"
                "    return pos, allowed\n"
            ),
        },
        library=(
            "import torch\n"
            "def packed_row(lengths, capacity):\n"
            "    b = PackingCollator(capacity, 0, completion_only=False, strategy='greedy')(\n"
            "        [[1] * n for n in lengths])\n"
            "    return b['position_ids'][0].tolist(), document_attention_mask(b['document_ids'])[0]\n"
        ),
    ),
    "bug-packed-forward": Item(
        wrong={
            "the careless forward itself": (
                "import torch\n"
                "def packed_forward(model, batch):\n"
                "    return model(input_ids=batch['input_ids'], position_ids=batch['position_ids'])\n"
            ),
            "the first row's restarts only, then one segment to the end": _forward(
                "    starts = (positions[0] == 0).nonzero().flatten()\n"
                "    cu = torch.cat([starts, torch.tensor([rows * width])]).to(torch.int32)\n"
            ),
            "each row's restarts without the row's offset": _forward(
                "    starts = [(row == 0).nonzero().flatten() for row in positions]\n"
                "    cu = torch.cat(starts + [torch.tensor([rows * width])]).to(torch.int32)\n"
            ),
            "the first offset written twice": _forward(
                "    starts = (positions.reshape(-1) == 0).nonzero().flatten()\n"
                "    cu = torch.cat([torch.tensor([0]), starts, torch.tensor([rows * width])])\n"
                "    cu = cu.to(torch.int32)\n"
            ),
            "a boundary only where the position goes down (misses one-token documents)": _forward(
                "    flat = positions.reshape(-1)\n"
                "    down = (flat[1:] < flat[:-1]).nonzero().flatten() + 1\n"
                "    cu = torch.cat([torch.tensor([0]), down, torch.tensor([rows * width])])\n"
                "    cu = cu.to(torch.int32)\n"
            ),
            "logits of a fresh model, not of the one given": (
                "import torch\n"
                "def packed_forward(model, batch):\n"
                "    fresh = type(model)(model.config)\n"
                "    pos = batch['position_ids']\n"
                "    starts = (pos.reshape(-1) == 0).nonzero().flatten()\n"
                "    cu = torch.cat([starts, torch.tensor([pos.numel()])]).to(torch.int32)\n"
                "    return fresh(input_ids=batch['input_ids'], position_ids=pos, cu_seq_lens=cu)\n"
            ),
        },
        forms={
            "the logits tensor itself, not the model's output": (
                "import torch\n"
                "def packed_forward(model, batch):\n"
                "    pos = batch['position_ids']\n"
                "    starts = (pos.reshape(-1) == 0).nonzero().flatten()\n"
                "    cu = torch.cat([starts, torch.tensor([pos.numel()])]).to(torch.int32)\n"
                "    return model(input_ids=batch['input_ids'], position_ids=pos,\n"
                "                 cu_seq_lens=cu).logits\n"
            ),
        },
        library=(
            "from course_lib.isolation import default_call\n"
            "from course_lib.packing import PackingCollator\n"
            "import torch\n"
            "def packed_forward(model, batch):\n"
            "    ids = batch['input_ids'].reshape(-1).tolist()\n"
            "    pos = batch['position_ids'].reshape(-1).tolist()\n"
            "    starts = [i for i, p in enumerate(pos) if p == 0] + [len(pos)]\n"
            "    rows = PackingCollator(batch['input_ids'].shape[1], 0, completion_only=False,\n"
            "        strategy='greedy')([ids[a:b] for a, b in zip(starts, starts[1:])])\n"
            "    return default_call(model, rows)\n"
        ),
    ),
    "q3": Item(
        wrong={
            "forgot that the third document reads the first": (
                "q3_cross_pairs = 1000 * 600 + 600 * 448\nq3_symptom = 'B'"
            ),
            "pairs counted both ways (a query reading a later key too)": (
                "q3_cross_pairs = 2 * (1000 * 600 + (1000 + 600) * 448)\nq3_symptom = 'B'"
            ),
            "the pairs that stay inside a document": (
                "q3_cross_pairs = 1000 * 1001 // 2 + 600 * 601 // 2 + 448 * 449 // 2\n"
                "q3_symptom = 'B'"
            ),
            "the right count, the wrong symptom": (
                "q3_cross_pairs = 1000 * 600 + (1000 + 600) * 448\nq3_symptom = 'A'"
            ),
        },
        library=(
            "from course_lib.masks import causal_allowed\n"
            "_ids = torch.tensor([[0] * 1000 + [1] * 600 + [2] * 448])\n"
            "q3_cross_pairs = int((causal_allowed(2048) & ~document_attention_mask(_ids)[0]).sum())\n"
            "q3_symptom = 'B'"
        ),
    ),
}
