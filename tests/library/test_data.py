"""Tokenizer, synthetic instruction data and length histograms (course_lib/data.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import data
from course_lib.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SEP_ID,
    SPECIAL_IDS,
    VOCAB_SIZE,
    decode,
    encode,
    example_lengths,
    length_histogram_from_csv,
    lengths_from_histogram,
    load_length_histogram,
    make_instruction_dataset,
    sample_lengths,
)


def test_special_ids_sit_above_the_bytes():
    assert sorted([PAD_ID, BOS_ID, EOS_ID, SEP_ID]) == [256, 257, 258, 259]
    assert max(SPECIAL_IDS) == VOCAB_SIZE - 1  # every id the data uses has an embedding row


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=200))
def test_encode_decode_round_trip(text):
    ids = encode(text)
    assert all(0 <= i < 256 for i in ids)
    assert len(ids) == len(text.encode("utf-8"))
    assert decode(ids) == text


def test_decode_special_tokens():
    ids = [BOS_ID, *encode("hi"), SEP_ID, *encode("yo"), EOS_ID, PAD_ID]
    assert decode(ids) == "hiyo"
    assert decode(ids, show_special=True) == "<bos>hi<sep>yo<eos><pad>"
    with pytest.raises(ValueError, match="token id 300"):
        decode([300])


@pytest.fixture(scope="module")
def dataset():
    return make_instruction_dataset(3000, seed=0)


def test_examples_are_well_formed(dataset):
    for ex in dataset:
        ids, p = ex["input_ids"], ex["prompt_len"]
        assert ids[0] == BOS_ID and ids[-1] == EOS_ID
        assert ids[p - 1] == SEP_ID and ids.count(SEP_ID) == 1
        assert 2 <= p < len(ids) - 1  # a non-empty completion follows the separator
        assert all(0 <= i < VOCAB_SIZE for i in ids)
        assert PAD_ID not in ids


def test_same_seed_same_data_other_seed_other_data():
    a = make_instruction_dataset(50, seed=3)
    assert a == make_instruction_dataset(50, seed=3)
    assert a != make_instruction_dataset(50, seed=4)


def test_lengths_are_long_tailed_like_instruction_data(dataset):
    lengths = example_lengths(dataset)
    assert 200 <= lengths.mean() <= 300
    assert np.median(lengths) < 0.85 * lengths.mean()  # right-skewed
    assert (lengths > 1000).mean() > 0.005  # a real tail past 1,000 tokens
    assert lengths.max() <= 2048


def test_max_len_redraws_instead_of_clipping():
    lengths = example_lengths(make_instruction_dataset(2000, seed=1, max_len=300))
    assert lengths.max() <= 300
    # clipping would pile every long draw (about 30% of them) at exactly 300
    assert (lengths >= 295).mean() < 0.05


def test_tasks_are_learnable_functions_of_the_prompt(dataset):
    checked = 0
    for ex in dataset[:300]:
        text = decode(ex["input_ids"], show_special=True)
        prompt, completion = text[len("<bos>") : -len("<eos>")].split("<sep>")
        words = prompt.split(": ", 1)[-1].split()
        if ex["task"] == "copy":
            assert completion.split() == words
        elif ex["task"] == "upper":
            assert completion.split() == [w.upper() for w in words]
        elif ex["task"] == "reverse":
            assert completion.split() == words[::-1]
        elif ex["task"] == "count":
            assert completion.startswith(f"There are {len(prompt.split(': ', 1)[1].split())} ")
        else:
            continue
        checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    "kwargs", [{"n": -1}, {"n": 2.5}, {"n": 5, "max_len": 10}, {"n": 5, "sigma": 0.0}]
)
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        make_instruction_dataset(**kwargs)


def test_sample_lengths_matches_the_generator_distribution():
    drawn = sample_lengths(20000, seed=0)
    assert drawn.min() >= data.MIN_LEN and drawn.max() <= 2048
    generated = example_lengths(make_instruction_dataset(2000, seed=0))
    # realised examples fall short of their draw by at most about one sentence
    assert abs(np.median(drawn) - np.median(generated)) < 25


def test_histogram_csv_round_trip(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("length,count\n1,0\n2,3\n3,1\n5,6\n")
    lengths, counts = length_histogram_from_csv(path)
    assert lengths.tolist() == [2, 3, 5] and counts.tolist() == [3, 1, 6]
    drawn = lengths_from_histogram(lengths, counts, 5000, seed=0)
    assert set(drawn.tolist()) <= {2, 3, 5}
    assert abs((drawn == 5).mean() - 0.6) < 0.03
    scaled = lengths_from_histogram(lengths, counts, 5000, seed=0, scale=4)
    assert scaled.min() >= 5 and scaled.max() <= 20  # (2-1)*4+1 .. 5*4
    assert len(set(scaled.tolist())) > 3  # the finer lengths are filled, not only multiples of 4
    path.write_text("len,n\n1,2\n")
    with pytest.raises(ValueError, match="length,count"):
        length_histogram_from_csv(path)


def test_shipped_wikipedia_histogram_reads():
    lengths, counts = load_length_histogram("wikipedia_512")
    assert lengths.max() == 512
    mean = (lengths * counts).sum() / counts.sum()
    assert 200 < mean < 300  # Krell et al. 2021: about half of 512 slots are padding


def test_shipped_squad_histogram_reads_and_bad_names_are_named():
    lengths, counts = load_length_histogram("squad_1_1_384")
    assert lengths.max() <= 384 and counts.sum() > 10_000
    with pytest.raises(ValueError, match="no length histogram named 'c4'"):
        load_length_histogram("c4")
