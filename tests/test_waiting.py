"""fsguard.waiting: every wait is bounded by its budget, backs off, and ends early on a result or a stop event."""

from __future__ import annotations

import threading
import time

import pytest

from fsguard.waiting import Backoff, wait_for


def test_a_probe_that_never_answers_waits_its_budget_and_no_longer() -> None:
    calls: list[float] = []

    def probe() -> None:
        calls.append(time.monotonic())

    seen, waited = wait_for(probe, 0.2, 0.01, 0.04)
    assert seen is None
    assert 0.2 <= waited < 1.0  # the budget, plus what the scheduler adds to the last sleep
    assert len(calls) <= 8, calls  # 10, 20, 40, 40, 40... ms: the last step cut to the budget
    backoff = Backoff(1.0, 0.0001, 0.0004, factor=2.0)
    steps = []
    for _ in range(4):
        steps.append(backoff.step_s)
        assert backoff.pause()
    assert steps == [0.0001, 0.0002, 0.0004, 0.0004]


def test_an_answer_ends_the_wait_at_once() -> None:
    answers = iter([None, None, "there"])
    seen, waited = wait_for(lambda: next(answers), 5.0, 0.001, 0.002)
    assert seen == "there"
    assert waited < 1.0


def test_a_stop_event_ends_a_long_wait() -> None:
    stop = threading.Event()
    threading.Timer(0.05, stop.set).start()
    seen, waited = wait_for(lambda: None, 30.0, 1.0, 1.0, stop=stop)
    assert seen is None
    assert waited < 1.0


def test_tries_and_paused_only_budget() -> None:
    backoff = Backoff(10.0, 0.001, 0.001, tries=3, paused_only=True)
    paused = 0
    while backoff.pause():
        paused += 1
        time.sleep(0.01)  # work between the steps: not waiting
    assert paused == 3
    assert backoff.waited() == pytest.approx(0.003)
    spent = Backoff(0.0, 0.001, 0.001)
    assert not spent.pause()  # a spent budget does not sleep at all
    grown = Backoff(0.0, 0.001, 0.001)
    grown.budget_s = 1.0
    assert grown.pause()
