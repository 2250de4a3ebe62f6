"""What tests/notebooks/test_assessment.py tries against lesson 02's autograded items."""

from assessment import Item

ITEMS: dict[str, Item] = {
    "predict-waste": Item(
        wrong=[
            "predicted_waste = 0.365",  # the share of real tokens, not of padding
            "predicted_waste = 1 - (120 + 250 + 90 + 1000) / (4 * 250)",  # padded to the mean
        ],
        library="predicted_waste = padding_stats([[120, 250, 90, 1000]]).waste_fraction",
        constants=["predicted_waste"],
    ),
    "target-batch": Item(
        wrong=["target_batch_size = 8", "target_batch_size = 5"],
        library=(
            "target_batch_size = max(b for b in range(1, 65) if padding_stats(\n"
            "    [lengths[i].tolist() for i in random_batches(len(lengths), b, seed=seed)]\n"
            ").waste_fraction < 0.5)"
        ),
        constants=["target_batch_size"],
    ),
    "position-ids": Item(
        wrong=[
            # positions never reset, plain causal mask: the careless row
            "import torch\n"
            "def packed_row(lengths, capacity):\n"
            "    if any(n <= 0 for n in lengths) or sum(lengths) > capacity:\n"
            "        raise ValueError('bad lengths')\n"
            "    return list(range(capacity)), torch.ones(capacity, capacity, dtype=torch.bool).tril()\n",
            # positions right, mask without the causal part
            "import torch\n"
            "def packed_row(lengths, capacity):\n"
            "    if any(n <= 0 for n in lengths) or sum(lengths) > capacity:\n"
            "        raise ValueError('bad lengths')\n"
            "    segs = list(lengths) + ([capacity - sum(lengths)] if sum(lengths) < capacity else [])\n"
            "    pos = [p for n in segs for p in range(n)]\n"
            "    s = torch.tensor([d for d, n in enumerate(segs) for _ in range(n)])\n"
            "    return pos, s[:, None] == s[None, :]\n",
        ],
        library=(
            "import torch\n"
            "def packed_row(lengths, capacity):\n"
            "    b = PackingCollator(capacity, 0, completion_only=False, strategy='greedy')(\n"
            "        [[1] * n for n in lengths])\n"
            "    return b['position_ids'][0].tolist(), document_attention_mask(b['document_ids'])[0]\n"
        ),
    ),
    "bug-packed-forward": Item(
        wrong=[
            # the careless forward itself
            "import torch\n"
            "def packed_forward(model, batch):\n"
            "    return model(input_ids=batch['input_ids'], position_ids=batch['position_ids'])\n",
            # offsets per row instead of into the flattened stream (first row only)
            "import torch\n"
            "def packed_forward(model, batch):\n"
            "    pos = batch['position_ids']\n"
            "    starts = (pos[0] == 0).nonzero().flatten()\n"
            "    cu = torch.cat([starts, torch.tensor([pos.numel()])]).to(torch.int32)\n"
            "    return model(input_ids=batch['input_ids'], cu_seq_lens=cu)\n",
        ],
        library=(
            "from course_lib.isolation import default_call\n"
            "import torch\n"
            "def packed_forward(model, batch):\n"
            "    return default_call(model, batch)\n"
        ),
    ),
    "q3": Item(
        wrong=[
            "q3_cross_pairs = 1000 * 600 + 600 * 448\nq3_symptom = 'B'",  # forgot doc 1 -> doc 3
            "q3_cross_pairs = 1000 * 600 + (1000 + 600) * 448\nq3_symptom = 'A'",
        ],
        library=(
            "from course_lib.masks import causal_allowed\n"
            "_ids = torch.tensor([[0] * 1000 + [1] * 600 + [2] * 448])\n"
            "q3_cross_pairs = int((causal_allowed(2048) & ~document_attention_mask(_ids)[0]).sum())\n"
            "q3_symptom = 'B'"
        ),
        constants=["q3_cross_pairs"],
    ),
}
