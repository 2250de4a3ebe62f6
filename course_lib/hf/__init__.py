"""The memory of one training step of a real Hugging Face model, predicted from its config alone.

``predict.py`` (:func:`~course_lib.hf.predict.predict_hf_step`, also exported by
:mod:`course_lib.memory`) records the step as the autograd nodes PyTorch creates (``models.py``
writes each family's forward from the recipes in ``ops.py`` on a ``tape.py``), and ``replay.py``
frees each byte when PyTorch would. ``scaling.py`` reads the peak as a line in rows and depth.
Nothing here imports torch, so ``python -m course_lib plan --model ...`` answers at once;
:mod:`course_lib.memory.hf_check` measures tiny real models beside the prediction.
"""
