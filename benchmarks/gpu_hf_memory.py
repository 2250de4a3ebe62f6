"""The Hugging Face memory model against the CUDA allocator (``make bench-gpu``).

    python benchmarks/gpu_hf_memory.py          # every family and setting on the GPU
    python benchmarks/gpu_hf_memory.py --quick

The same comparison as ``benchmarks/hf_memory.py``, on ``cuda``: the allocator's peak beside the
prediction and beside the exact count. Exits 0 with a message on a machine without CUDA.
"""

from __future__ import annotations

import sys

import torch
from hf_memory import main  # this script's folder is on sys.path when it runs

if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("no CUDA device here: skipping the GPU comparison of the Hugging Face memory model")
        sys.exit(0)
    sys.exit(main(["--device", "cuda", *sys.argv[1:]]))
