"""The judge's call protocol (``course_grading/judge/protocol.py``, ``sandbox/inside/runner.py``).

A graded function runs alone in a sandboxed process that holds its answer cell and the arguments
of the call it is serving; ``fits`` and the optimiser stand-in are proxies whose state lives in
the judge. Each attack below scored on the design this replaced (the function held its inputs
and wrote the evidence the check read); each test shows what it gets now, and the honest
solution beside it keeps full marks.
"""

from __future__ import annotations

import json
import time

import nbformat
import pytest
from class_builders import REPO, sandbox_problem

from course_grading.judge import functions, items
from course_grading.judge.items import Evidence, call
from course_grading.judge.proxies import judge_side

SANDBOX = not sandbox_problem()
LESSON = "05_choosing_the_numbers"
ITEM = "test-largest-fitting"


@pytest.fixture(scope="module")
def settings():
    if SANDBOX:
        return functions.FunctionSandbox.default()
    return functions.FunctionSandbox(None)


def quick(settings, **changes):
    """``settings`` with small per-call limits, so that a stopped call costs a test little."""
    from dataclasses import replace

    return replace(settings, **{"call_cap": 0.5, "call_wall_factor": 2.0, **changes})


def _run(settings, source, *calls):
    return functions.run(source, "f", list(calls), settings=settings)


def _solution(grade_id: str) -> str:
    path = REPO / "solutions" / LESSON / f"{LESSON}.ipynb"
    nb = nbformat.read(str(path), as_version=4)
    (cell,) = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id]
    return cell.source


def _grade(settings, source: str, student: str = "ann"):
    item = items.items_of(LESSON)[ITEM]
    ev = Evidence(item, student, answer_source=source, sandbox=settings)
    return items.verdict(item, ev, []), ev


# --- the honest solution, and the attacks that used to score ------------------------------------


def test_the_solution_scores_full_marks_through_the_proxies(settings):
    verdict, ev = _grade(settings, _solution("largest-fitting"))
    assert verdict.points == verdict.max_points == 6, verdict.message
    assert len(ev.call_times) > 20 and all(cpu >= 0 and wall > 0 for cpu, wall in ev.call_times)


def test_the_card_limit_never_reaches_the_students_process(settings):
    """Attack 1: the function read ``fits._limit`` (or the lambda's closure) and returned it."""
    reader = (
        "import gc\n"
        "def largest_fitting(fits, guess):\n"
        "    found = getattr(fits, '_limit', None)\n"
        "    if found is None:\n"
        "        for cell in getattr(getattr(fits, '__call__', None), '__closure__', None) or ():\n"
        "            found = cell.cell_contents\n"
        "    if found is None:\n"
        "        found = next((o['limit'] for o in gc.get_objects()\n"
        "                      if type(o) is dict and type(o.get('limit')) is int), None)\n"
        "    if found is None:\n"
        "        return 0\n"
        "    if found == 0:\n"
        "        raise ValueError('nothing fits')\n"
        "    fits(found), fits(found + 1)  # the two probes the check asks for\n"
        "    return found\n"
    )
    verdict, _ = _grade(settings, reader)
    assert verdict.points == 0
    assert "returned 0: not the card's limit" in verdict.message
    # and what the process is sent for a call holds the guess, never the limit
    proxies: dict = {}
    wire = judge_side(call(items.predicate(4097), 4096), proxies)
    assert "4097" not in json.dumps(wire) and proxies[0].limit == 4097


def test_an_answer_cell_that_forges_its_answers_gets_nothing(settings):
    """Attack 2: top-level code wrote its own results (and probes) to the answer channel and
    exited; its function was ``return 0``."""
    forger = (
        "import __main__, os\n"
        "channel = __main__.CHANNEL\n"
        "channel.send({'op': 'defined', 'defined': True, 'error': None})\n"
        "for _ in range(40):\n"
        "    channel.send({'op': 'result', 'returned': 37, 'after': [[37, 38]]})\n"
        "os._exit(0)\n"
        "def largest_fitting(fits, guess):\n"
        "    return 0\n"
    )
    verdict, _ = _grade(settings, forger)
    assert verdict.points == 0
    assert "was stopped: it wrote to the grader's channel before it was asked" in verdict.message


def test_a_forger_is_named_the_same_however_the_pipe_times_it(settings):
    """The forged results, written after a pause, reach the judge once it has asked its
    question: they still carry the answered definition's nonce, so they were written before
    that question, and the stop says so (under load the first forger's test once read "answers
    no question asked" instead)."""
    slow = (
        "import __main__, os, time\n"
        "channel = __main__.CHANNEL\n"
        "channel.send({'op': 'defined', 'defined': True, 'error': None})\n"
        "time.sleep(0.5)  # the judge asks its first question meanwhile\n"
        "channel.send({'op': 'result', 'returned': 37, 'after': [[37, 38]]})\n"
        "os._exit(0)\n"
        "def largest_fitting(fits, guess):\n"
        "    return 0\n"
    )
    verdict, _ = _grade(settings, slow)
    assert verdict.points == 0
    assert "was stopped: it wrote to the grader's channel before it was asked" in verdict.message


def test_the_forger_as_first_found_gets_nothing(settings):
    """Attack 2 as it was found: the runner's request (every call's inputs, the card limits
    included) read from the caller's frame, the answer written to the answer descriptor."""
    forger = (
        "import sys, os, json\n"
        "here = sys._getframe(1).f_locals\n"
        "answers = []\n"
        "for request in here['request']['calls']:\n"
        "    limit = request['args'][0]['predicate']['limit']\n"
        "    if limit == 0:\n"
        "        answers.append({'raised': {'type': 'ValueError', 'message': '', 'name': None}})\n"
        "    else:\n"
        "        answers.append({'returned': limit, 'after': [{'list': [limit, limit + 1]}]})\n"
        "os.write(here['answer_fd'], json.dumps({'defined': True, 'error': None,\n"
        "                                        'calls': answers}).encode())\n"
        "os._exit(0)\n"
        "def largest_fitting(fits, guess):\n"
        "    return 0\n"
    )
    verdict, _ = _grade(settings, forger)
    assert verdict.points == 0
    assert "your answer cell, run on its own, raised" in verdict.message


def test_probes_the_runner_claims_are_not_evidence(settings):
    """The same attack by hooking the runner: its results claim the probes that prove an answer;
    the probes the check reads are the judge's own."""
    hook = (
        "import __main__\n"
        "def forged(function, call):\n"
        "    guess = call['args'][1]\n"
        "    return {'returned': guess, 'after': [[guess, guess + 1]]}\n"
        "__main__._call = forged\n"
        "def largest_fitting(fits, guess):\n"
        "    return 0\n"
    )
    verdict, _ = _grade(settings, hook)
    assert verdict.points == 0
    assert "without probing the sizes that prove its answer" in verdict.message


def test_a_function_that_stalls_only_when_graded_costs_one_bounded_call(settings):
    """Attack 4: a sleep only when the grader calls; the call is stopped and named, the rest are
    not made, and the whole item takes about one call's limit."""
    sleeper = "import time\ndef largest_fitting(fits, guess):\n    time.sleep(600)\n"
    started = time.monotonic()
    verdict, _ = _grade(quick(settings), sleeper)
    took = time.monotonic() - started
    assert verdict.points == 0
    assert "was stopped: it took more than 2 s of wall-clock time" in verdict.message
    assert "a card whose limit is 37, 37" in verdict.message  # the first call, by name
    assert took < 15, took


# --- the protocol, one rule at a time -----------------------------------------------------------


def test_calls_run_one_at_a_time_in_one_process(settings):
    source = "import os\nseen = []\ndef f(x):\n    seen.append(x)\n    return [os.getpid(), seen]\n"
    ran = _run(settings, source, call(1), call(2))
    (pid1, seen1), (pid2, seen2) = (c["returned"] for c in ran.answer["calls"])
    assert pid1 == pid2 and seen1 == [1] and seen2 == [1, 2]


def test_a_question_the_proxy_cannot_answer_raises_in_the_students_code(settings):
    source = (
        "def f(fits):\n"
        "    try:\n"
        "        fits('large')\n"
        "    except TypeError as err:\n"
        "        return [str(err), fits(3), fits(4)]\n"
    )
    ran = _run(settings, source, call(items.predicate(3), after=({"probes": 0},)))
    got = ran.answer["calls"][0]
    assert got["returned"] == ["fits() takes a number, not str", True, False]
    assert got["after"] == [["'large'", 3, 4]]  # recorded by the judge, in order


def test_a_cpu_spinner_is_stopped_by_the_per_call_limit(settings):
    limited = quick(settings, solution_cpu={("l", "i"): 0.001}, call_floor=0.3)
    assert functions.call_limit(limited, ("l", "i")).cpu == 0.3
    assert functions.call_limit(limited, ("l", "j")).cpu == 0.5  # not measured: the cap
    source = "def f(n):\n    if n:\n        while True:\n            pass\n    return n\n"
    ran = functions.run(source, "f", [call(0), call(1), call(0)], settings=limited, key=("l", "i"))
    first, second, third = ran.answer["calls"]
    assert first["returned"] == 0
    assert second["kind"] == "cpu" and "more than 0.3 s of CPU time" in second["stopped"]
    assert third == {"stopped": "not made: call 2 was stopped", "kind": "skipped"}


def test_the_limit_follows_the_solutions_measured_time(settings):
    measured = quick(settings, solution_cpu={("l", "i"): 0.2}, call_floor=0.3)
    limit = functions.call_limit(measured, ("l", "i"))
    assert limit.cpu == pytest.approx(20 * 0.2) and limit.wall == pytest.approx(2 * 4.0 + 1)
    assert "20 times the solution's slowest call" in limit.why


@pytest.mark.parametrize(
    ("body", "kind", "words"),
    [
        ("os._exit(3)", "exit", "its process ended during the call (exit status 3)"),
        (
            "os.write(__main__.CHANNEL.write_fd, (2**31).to_bytes(4, 'big'))",
            "size",
            "more than 16 MiB at once",
        ),
        (
            "os.write(__main__.CHANNEL.write_fd, b'\\0\\0\\0\\3abc')",
            "forged",
            "not an answer",
        ),
        (
            "__main__.CHANNEL.nonce = 'guess'; __main__.CHANNEL.send({'op': 'result', "
            "'returned': 1})",
            "forged",
            "answers no question asked",
        ),
    ],
    ids=["exit", "oversized", "garbage", "wrong-nonce"],
)
def test_a_broken_or_forged_reply_stops_that_call(settings, body, kind, words):
    source = f"import os, time, __main__\ndef f():\n    {body}\n    time.sleep(5)\n"
    ran = _run(quick(settings), source, call(), call())
    stopped, skipped = ran.answer["calls"]
    assert stopped["kind"] == kind and words in stopped["stopped"], stopped
    assert skipped["kind"] == "skipped"


def test_a_write_after_the_last_answer_fails_the_last_call(settings):
    source = (
        "import __main__\n"
        "real = __main__._call\n"
        "def twice(function, request):\n"
        "    answer = real(function, request)\n"
        "    __main__.CHANNEL.send(dict(answer, op='result'))\n"
        "    return answer\n"
        "__main__._call = twice\n"
        "def f():\n"
        "    return 1\n"
    )
    (last,) = _run(settings, source, call()).answer["calls"]
    assert last == {"stopped": "it wrote to the grader's channel after its last answer",
                    "kind": "extra"}  # fmt: skip
    first, second = _run(settings, source, call(), call()).answer["calls"]
    assert first["returned"] == 1 and second["kind"] == "extra"


def test_the_cell_itself_is_bounded_too(settings):
    ran = _run(quick(settings), "import time\ntime.sleep(600)\ndef f():\n    return 1\n", call())
    assert ran.answer is None and "running your answer cell: it took more than" in ran.failure


def test_an_empty_tensor_with_huge_dimensions_is_a_reason_not_a_hang(settings):
    """Attack 3: no elements, so a shape check passes, but 2**62 rows to build as lists."""
    source = "import torch\ndef f():\n    return torch.empty(2**62, 1, 0)\n"
    started = time.monotonic()
    (got,) = _run(settings, source, call()).answer["calls"]
    assert "not_plain" in got and "returned" not in got, got
    result = items.Result("f()", not_plain=got["not_plain"])
    with pytest.raises(items.Reject, match="f\\(\\) returned something that is"):
        result.value()
    assert time.monotonic() - started < 30


def test_flooding_the_proxies_stops_the_call_at_its_byte_budget(settings):
    """Questions of 3 MiB each, 40 of them: the call stops at 64 MiB, the judge holds little."""
    source = (
        "import __main__\n"
        "def f(fits):\n"
        "    big = 'x' * (3 * 2**20)\n"
        "    for _ in range(40):\n"
        "        try:\n"
        "            __main__._ask(0, 'call', [big])\n"
        "        except TypeError:\n"
        "            pass\n"
        "    return 1\n"
    )
    (got,) = _run(settings, source, call(items.predicate(5))).answer["calls"]
    assert got["kind"] == "size" and "more than 64 MiB in one call" in got["stopped"]
