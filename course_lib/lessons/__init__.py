"""The experiments each lesson runs, one module per lesson, each returning results (dataclasses)
that the figure module of the same name draws (:mod:`course_lib.figures`).

* :mod:`~course_lib.lessons.attention`: lesson 1, splits of a token budget;
* :mod:`~course_lib.lessons.padding`: lesson 2, batch layouts, throughput, long rows at a fixed
  budget, careless packing; :mod:`~course_lib.lessons.flattening`: lesson 2, Hugging Face's
  flattening collator in a tiny random Llama;
* :mod:`~course_lib.lessons.accumulation`: lesson 3, accumulation windows, two training runs,
  data-parallel ranks, training loops checked against the full batch; its second module
  :mod:`~course_lib.lessons.accumulation_cost`, the summed loss and an accumulated step's
  memory and wall time (a lesson's experiments stay in one module unless they outgrow the
  size limit);
* :mod:`~course_lib.lessons.checkpointing`: lesson 4, what fits a budget with and without
  recomputation;
* :mod:`~course_lib.lessons.choosing`: lesson 5, the search, the plan and the small-dataset trap.

A lesson module trains, packs, measures or plans by calling the concept modules (``model``,
``packing``, ``accumulation``, ``memory``, ``plan``...); it adds no concept of its own, so
nothing here is needed outside the lesson it serves.
"""
