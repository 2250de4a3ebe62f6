"""A byte-level tokenizer and seeded synthetic instruction data with realistic lengths.

Tokenizer: every UTF-8 byte is its own token (ids 0..255), plus four special ids:
``PAD_ID=256``, ``BOS_ID=257``, ``EOS_ID=258``, ``SEP_ID=259`` (``VOCAB_SIZE=260``, the default
``TinyGPTConfig.vocab_size``). One token is one byte, so a token count here is a byte count; a real
BPE tokenizer would give about 4 times fewer tokens for the same English text. What the course
reproduces is the *token-length distribution* of real instruction data, not its text.

An example is ``BOS + prompt + SEP + completion + EOS``. ``prompt_len`` counts ``BOS + prompt +
SEP``: the tokens ``input_ids[:prompt_len]`` are context the loss should not train on
(completion-only labels), ``input_ids[prompt_len:]`` (completion and EOS) are the targets.

Length distribution. Total token counts are drawn from a lognormal with median
``exp(log_mu)`` ≈ 167 tokens and ``sigma`` = 0.9, so mean ≈ 167·exp(0.9²/2) ≈ 250 tokens, about 2%
of examples beyond 1,000 tokens and a handful beyond 2,000. These numbers are our choice, made to
look like the shape commonly reported for single-turn instruction-tuning sets (Dolly-15k,
OpenAssistant-style data, Alpaca-style data with long answers): a mean of a few hundred tokens, a
median well below the mean, and a long right tail. They are not fitted to any one dataset. For a
real published histogram see ``length_histogram_from_csv`` (BERT Wikipedia and SQuAD lengths from
Krell et al. 2021), which the benchmarks use.

``max_len`` caps the total length *by design*: a drawn length above ``max_len`` is redrawn (the
distribution is a lognormal truncated at ``max_len``), so no example is ever cut mid-text, and the
docstring of :func:`make_instruction_dataset` says so. The content is templated English from small
word lists (copy, capitalise, reverse, count, describe), regular enough that a tiny model learns
something in a few hundred steps.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

import numpy as np

PAD_ID = 256
BOS_ID = 257
EOS_ID = 258
SEP_ID = 259
VOCAB_SIZE = 260
SPECIAL_IDS = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>", SEP_ID: "<sep>"}

LOG_MU = math.log(167.0)
SIGMA = 0.9
MIN_LEN = 40  # the shortest templated example: BOS + "Repeat these words: fox" + SEP + "fox" + EOS
_TASKS = ("copy", "upper", "reverse", "count", "describe", "describe")


def encode(text: str) -> list[int]:
    """UTF-8 bytes of ``text`` as token ids in ``[0, 256)``. No special tokens are added.

    Args:
        text: any text; non-ASCII characters take 2 to 4 tokens (their UTF-8 bytes).

    Returns:
        One id per UTF-8 byte, so ``len(encode(t)) == len(t.encode())``.

    Raises:
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"encode needs a str, got {type(text).__name__}: {text!r:.60}")
    return list(text.encode("utf-8"))


def decode(ids: Iterable[int], show_special: bool = False) -> str:
    """Text from token ids. Special ids are dropped, or shown as ``<bos>`` etc. if asked.

    Args:
        ids: token ids (ints, or anything ``int()`` reads: numpy or 0-d torch values).
        show_special: write special ids as ``<pad>``, ``<bos>``, ``<eos>``, ``<sep>`` instead of
            dropping them.

    Returns:
        The bytes decoded as UTF-8 (an invalid sequence as U+FFFD), so
        ``decode(encode(t)) == t``.

    Raises:
        ValueError: an id that is neither a byte nor a special id.
    """
    out: list[str] = []
    buf = bytearray()
    for i in ids:
        i = int(i)
        if 0 <= i < 256:
            buf.append(i)
            continue
        if i not in SPECIAL_IDS:
            raise ValueError(f"token id {i} is not a byte or a special id (vocab is {VOCAB_SIZE})")
        if show_special:
            out.append(buf.decode("utf-8", errors="replace"))
            buf.clear()
            out.append(SPECIAL_IDS[i])
    out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)


_ADJ = tuple(
    "red quiet small bright old green quick heavy soft cold happy tall dark round sharp warm "
    "empty brave slow wild".split()
)
_NOUN = tuple(
    "fox river stone garden teacher window boat cloud market horse lamp forest bridge letter "
    "baker mountain song train field city".split()
)
_VERB = tuple(
    "sees follows paints carries finds watches builds crosses visits opens calls remembers".split()
)
_PLACE = tuple(
    "near the sea|in the morning|after the rain|under the bridge|at night|in the old town|"
    "on the hill|by the road".split("|")
)
_NUMBER_WORDS = tuple("zero one two three four five six seven eight nine".split())


def _words_to_length(rng: random.Random, n_bytes: int) -> list[str]:
    """Random words whose space-joined text has about ``n_bytes`` bytes (at least one word)."""
    words: list[str] = []
    size = -1
    while size < n_bytes or not words:
        w = rng.choice(_NOUN if rng.random() < 0.5 else _ADJ)
        words.append(w)
        size += len(w) + 1
    if len(words) > 1 and size > n_bytes:
        words.pop()  # stay at or under the target so max_len is respected by construction
    return words


def _sentence(rng: random.Random) -> str:
    a, b = rng.choice(_ADJ), rng.choice(_ADJ)
    n1, n2 = rng.choice(_NOUN), rng.choice(_NOUN)
    return f"The {a} {n1} {rng.choice(_VERB)} the {b} {n2} {rng.choice(_PLACE)}."


def _task(rng: random.Random, budget: int, kind: str) -> tuple[str, str]:
    """A (prompt, completion) pair of about ``budget`` UTF-8 bytes in total (may overshoot when
    ``budget`` is below the template's minimum; the caller then picks another task)."""
    if kind in ("copy", "upper", "reverse"):
        head = {
            "copy": "Repeat these words: ",
            "upper": "Write these words in capitals: ",
            "reverse": "Write these words in reverse order: ",
        }[kind]
        words = _words_to_length(rng, max(1, (budget - len(head)) // 2))
        if kind == "upper":
            answer = " ".join(words).upper()
        elif kind == "reverse":
            answer = " ".join(reversed(words))
        else:
            answer = " ".join(words)
        return head + " ".join(words), answer
    if kind == "count":
        head = "How many words are there in: "
        words = _words_to_length(rng, max(1, budget - len(head) - 30))
        n = len(words)
        spoken = " ".join(_NUMBER_WORDS[int(d)] for d in str(n))
        return head + " ".join(words) + "?", f"There are {n} ({spoken}) words."
    noun = rng.choice(_NOUN)
    prompt = f"Tell me about the {rng.choice(_ADJ)} {noun}."
    sentences: list[str] = []
    size = -1
    while True:
        s = _sentence(rng)
        if sentences and size + 1 + len(s) > budget - len(prompt):
            break
        sentences.append(s)
        size += 1 + len(s)
    return prompt, " ".join(sentences)


def _draw_length(rng: random.Random, max_len: int, log_mu: float, sigma: float) -> int:
    while True:  # truncated lognormal: redraw, never clip (clipping piles mass at max_len)
        n = int(round(rng.lognormvariate(log_mu, sigma)))
        if MIN_LEN <= n <= max_len:
            return n


def make_example(prompt: str, completion: str) -> dict:
    """One example: ``input_ids`` = BOS + prompt + SEP + completion + EOS.

    Args:
        prompt: the instruction (context: masked out of the loss).
        completion: the answer (the loss targets, with the EOS).

    Returns:
        ``{"input_ids": list[int], "prompt_len": int}``: ``len(encode(prompt)) +
        len(encode(completion)) + 3`` tokens, ``prompt_len`` = the tokens of BOS + prompt + SEP.
    """
    p = [BOS_ID, *encode(prompt), SEP_ID]
    return {"input_ids": p + encode(completion) + [EOS_ID], "prompt_len": len(p)}


def make_instruction_dataset(
    n: int,
    seed: int = 0,
    max_len: int = 2048,
    log_mu: float = LOG_MU,
    sigma: float = SIGMA,
) -> list[dict]:
    """``n`` seeded synthetic instruction examples with long-tailed token lengths.

    Each example is a dict with ``input_ids`` (list of int: BOS + prompt + SEP + completion + EOS),
    ``prompt_len`` (int: BOS + prompt + SEP, the tokens to mask out of the loss) and ``task``.

    The target total length of each example is drawn from lognormal(``log_mu``, ``sigma``) in
    tokens (defaults: median ≈ 167, mean ≈ 250, ~2% beyond 1,000 tokens; see the module docstring
    for what this imitates). By design, draws longer than ``max_len`` tokens or shorter than
    ``MIN_LEN`` are *redrawn*, so the result is a truncated lognormal and every example has at most
    ``max_len`` tokens; lowering ``max_len`` changes the distribution, it never cuts an example.
    The realised length is within one word of the draw. Same ``(n, seed, ...)``, same data.

    Args:
        n: number of examples.
        seed: seed of the one ``random.Random`` that draws lengths, tasks and words.
        max_len: most tokens in an example (a cap by redrawing, never by cutting).
        log_mu: mean of the log of the total length in tokens (median = ``exp(log_mu)``).
        sigma: standard deviation of the log length; larger means a longer tail.

    Returns:
        ``n`` dicts ``{"input_ids", "prompt_len", "task"}`` (``task`` one of ``"copy"``,
        ``"upper"``, ``"reverse"``, ``"count"``, ``"describe"``).

    Raises:
        ValueError: ``n`` negative or not an int, ``max_len`` below ``2 * MIN_LEN``, or
            ``sigma`` not positive.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 2 * MIN_LEN:
        raise ValueError(f"max_len={max_len!r} is too small: use an int ≥ {2 * MIN_LEN}")
    if not sigma > 0:
        raise ValueError(f"sigma must be positive, got {sigma}")
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        target = _draw_length(rng, max_len, log_mu, sigma)
        for attempt in range(8):
            # A short draw may not fit a long template: retry, then fall back to "copy", whose
            # minimum (MIN_LEN) always fits.
            kind = rng.choice(_TASKS) if attempt < 7 else "copy"
            prompt, completion = _task(rng, target - 3, kind)  # 3 = BOS, SEP, EOS
            ex = make_example(prompt, completion)
            if len(ex["input_ids"]) <= target:
                break
        if len(ex["input_ids"]) > max_len:  # cannot happen by construction; a guard only
            raise AssertionError(f"generated {len(ex['input_ids'])} tokens > max_len={max_len}")
        ex["task"] = kind
        examples.append(ex)
    return examples


def example_lengths(examples: Iterable[dict]) -> np.ndarray:
    """Token count of every example.

    Args:
        examples: dicts with ``input_ids`` (as :func:`make_instruction_dataset` builds them).

    Returns:
        int64 array ``(n,)``: ``len(ex["input_ids"])`` for each example, in order.
    """
    return np.array([len(ex["input_ids"]) for ex in examples], dtype=np.int64)


LENGTH_HISTOGRAMS = ("wikipedia_512", "squad_1_1_384")


def load_length_histogram(name: str = "wikipedia_512") -> tuple[np.ndarray, np.ndarray]:
    """A real length histogram shipped with the course (``course_lib/lengths/``).

    ``"wikipedia_512"``: English Wikipedia BERT pre-training sequences (max 512 tokens);
    ``"squad_1_1_384"``: SQuAD 1.1 (max 384). Both from Krell et al. 2021 (Graphcore, MIT licence;
    see ``course_lib/lengths/README.md``).

    Args:
        name: one of :data:`LENGTH_HISTOGRAMS`.

    Returns:
        ``(lengths, counts)`` as int64 arrays of the same shape, like
        :func:`length_histogram_from_csv`: ``counts[i]`` sequences had ``lengths[i]`` tokens.

    Raises:
        ValueError: an unknown name (listing the shipped ones).
    """
    if name not in LENGTH_HISTOGRAMS:
        raise ValueError(f"no length histogram named {name!r}; choose one of {LENGTH_HISTOGRAMS}")
    resource = resources.files("course_lib.lengths").joinpath(f"{name}_lengths.csv")
    with resources.as_file(resource) as path, open(path, newline="") as f:
        return _read_histogram(f, name)


def length_histogram_from_csv(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a ``length,count`` CSV file of your own.

    Args:
        path: a CSV file with a ``length,count`` header, one row per length in tokens.

    Returns:
        ``(lengths, counts)`` as int64 arrays ``(k,)``, rows with a zero count dropped.

    Raises:
        ValueError: no ``length,count`` header, a length that is not positive or a negative count.
    """
    with open(path, newline="") as f:
        return _read_histogram(f, str(path))


def _read_histogram(f, source: str) -> tuple[np.ndarray, np.ndarray]:
    lengths, counts = [], []
    reader = csv.DictReader(f)
    if reader.fieldnames is None or not {"length", "count"} <= set(reader.fieldnames):
        raise ValueError(f"{source} must have a 'length,count' header, got {reader.fieldnames}")
    for row in reader:
        length, count = int(row["length"]), int(row["count"])
        if length <= 0 or count < 0:
            raise ValueError(f"{source}: bad row length={length}, count={count}")
        if count:
            lengths.append(length)
            counts.append(count)
    return np.array(lengths, dtype=np.int64), np.array(counts, dtype=np.int64)


def lengths_from_histogram(
    lengths: Sequence[int] | np.ndarray, counts: Sequence[int] | np.ndarray, n: int, seed: int = 0,
    scale: int = 1,
) -> np.ndarray:  # fmt: skip
    """Draw ``n`` sequence lengths i.i.d. from a histogram, optionally stretched by ``scale``.

    With an integer ``scale`` > 1 each histogram length ``L`` stands for the ``scale`` finer
    lengths ``(L - 1) * scale + 1 .. L * scale``, drawn uniformly (so 512-token Wikipedia rows
    become a 2,048-token workload with the same shape, not only multiples of 4).

    Args:
        lengths: the histogram's lengths in tokens, ``(k,)``.
        counts: how often each length occurs, ``(k,)`` (weights: need not be integers).
        n: number of lengths to draw.
        seed: seed of the numpy generator.
        scale: stretch factor (1: the histogram's own lengths).

    Returns:
        int64 array ``(n,)`` of lengths in tokens, each in ``[1, max(lengths) * scale]``.

    Raises:
        ValueError: ``lengths`` and ``counts`` of different shapes or no positive count, or a
            ``scale`` that is not a positive int.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    counts = np.asarray(counts, dtype=np.float64)
    if lengths.shape != counts.shape or counts.sum() <= 0:
        raise ValueError("lengths and counts must have the same shape and a positive total count")
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be a positive int, got {scale!r}")
    rng = np.random.default_rng(seed)
    drawn = rng.choice(lengths, size=n, p=counts / counts.sum())
    if scale > 1:
        drawn = (drawn - 1) * scale + rng.integers(1, scale + 1, size=n)
    return drawn.astype(np.int64)


def sample_lengths(
    n: int, seed: int = 0, max_len: int = 2048, log_mu: float = LOG_MU, sigma: float = SIGMA
) -> np.ndarray:
    """The target lengths :func:`make_instruction_dataset` draws, without building any text.

    Same truncated lognormal (redrawn outside ``[MIN_LEN, max_len]``), vectorised for benchmarks
    with millions of lengths; not the same random stream, so not the same values for a seed.

    Args:
        n: number of lengths.
        seed: seed of the numpy generator.
        max_len: longest length kept, in tokens.
        log_mu: mean of the log length (median = ``exp(log_mu)`` tokens).
        sigma: standard deviation of the log length.

    Returns:
        int64 array ``(n,)`` of lengths in tokens, each in ``[MIN_LEN, max_len]``.
    """
    rng = np.random.default_rng(seed)
    out = np.empty(0, dtype=np.int64)
    while out.size < n:
        draw = np.rint(rng.lognormal(log_mu, sigma, size=2 * (n - out.size) + 16)).astype(np.int64)
        out = np.concatenate([out, draw[(draw >= MIN_LEN) & (draw <= max_len)]])
    return out[:n]
