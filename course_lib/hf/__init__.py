"""The memory of one training step of a real Hugging Face model, predicted from its config alone.

``predict.py`` (:func:`~course_lib.hf.predict.predict_hf_step`, also exported by
:mod:`course_lib.memory`) records the step as the autograd nodes PyTorch creates (``models.py``
writes each family's forward, ``families.py`` says how the families differ, from the recipes in
``ops.py``, ``attention.py``, ``norms.py``, ``layers.py``, ``mlp.py``, ``moe.py``, ``gpt2.py`` and
``losses.py`` on a ``tape.py``), and ``replay.py`` frees each byte when PyTorch would.
``scaling.py`` reads the peak as a line in rows and depth. ``memory.py``
(:func:`~course_lib.hf.memory.predict_hf_memory`) adds what does not depend on the batch
(weights, optimiser states, sharding per rank: ``states.py``) and what the card shows
(``cards.py``); ``packing_plan.py`` plans packed micro-batches from a length distribution.
Nothing here imports torch at import time, so ``python -m course_lib plan --model ...`` answers
at once; :mod:`course_lib.memory.hf_check` and ``distributed_check.py`` measure tiny real models
beside the prediction.
"""
