"""The ETA from expected test times: heavy tails, a slower device, guessed tests, ranges."""

from __future__ import annotations

import pytest

from conformance.eta import EtaModel
from conformance.progress import Progress

FAST = [(f"f.py::TestX::test_fast_{i}_float32", 0.01) for i in range(200)]
SLOW = ("f.py::TestX::test_gradcheck_big_float64", 270.0)


def model(recorded: dict[str, float] | None = None, workers: int = 2) -> EtaModel:
    eta = EtaModel(recorded=dict(recorded or {}), workers=workers)
    eta.expect((test_id, test_id) for test_id, _ in [*FAST, SLOW])
    return eta


def test_a_heavy_tail_is_the_eta_where_the_mean_rate_sees_nothing_left():
    eta = model(dict([*FAST, SLOW]))
    for test_id, seconds in FAST[:190]:
        eta.finished(test_id, test_id, seconds)
    estimate = eta.estimate(elapsed_s=1.0)
    assert estimate is not None
    # The mean rate: 190 tests in 1 s, 11 to go: 0.06 s. The gradcheck test alone is 270 s.
    assert 265 <= estimate.seconds <= 300
    assert estimate.estimated_share == 0.0
    assert not estimate.is_range


def test_recorded_times_scale_to_how_fast_this_run_turns_out_to_be():
    recorded = {f"f.py::TestY::test_t{i}": 1.0 for i in range(400)}
    eta = EtaModel(recorded=recorded, workers=1)
    eta.expect((t, t) for t in recorded)
    for test_id in list(recorded)[:200]:
        eta.finished(test_id, test_id, 3.0)  # this device: three times slower
    estimate = eta.estimate(elapsed_s=600.0)
    assert estimate is not None
    assert 500 <= estimate.seconds <= 620  # 200 tests of ~3 s on one worker


def test_unrecorded_tests_are_guessed_from_their_kin_and_shown_as_a_range():
    eta = EtaModel(workers=1)
    tests = [f"g.py::TestZ::test_op_{i % 10}_float32" for i in range(100)]
    tests += [f"g.py::TestZ::test_op_{i % 10}_float64" for i in range(100)]
    eta.expect((f"{t}#{n}", t) for n, t in enumerate(tests))
    assert eta.estimate(elapsed_s=0.0) is None  # nothing finished, nothing recorded
    times = [0.1, 5.0]  # the group's tests differ a lot: a wide range
    for n, test_id in enumerate(tests[:4]):
        eta.finished(f"{test_id}#{n}", test_id, times[n % 2])
    wide = eta.estimate(elapsed_s=10.2)
    assert wide is not None and wide.is_range
    assert wide.estimated_share == 1.0
    assert wide.low < wide.seconds < wide.high
    for n, test_id in enumerate(tests[4:150], start=4):
        eta.finished(f"{test_id}#{n}", test_id, 1.0)
    narrow = eta.estimate(elapsed_s=160.0)
    assert narrow is not None
    assert (narrow.high - narrow.low) / narrow.seconds < (wide.high - wide.low) / wide.seconds


def test_guesses_use_the_closest_group_recorded_or_seen():
    # Recorded: the same name in another dtype, so the same stem; and the class.
    eta = EtaModel(recorded={"h.py::TestA::test_conv_float32": 40.0}, workers=1)
    eta.expect([("n1", "h.py::TestA::test_conv_float64"), ("n2", "h.py::TestA::test_other")])
    estimate = eta.estimate(elapsed_s=0.0)
    assert estimate is not None
    assert estimate.seconds == pytest.approx(80.0)  # both from the class's only record


def test_the_progress_line_shows_the_models_eta_and_its_range():
    lines: list[str] = []
    clock = [100.0]
    eta = EtaModel(workers=1)
    progress = Progress(lines.append, interval_s=1, clock=lambda: clock[0], eta=eta)
    tests = [f"k.py::TestB::test_t{i % 3}" for i in range(30)]
    eta.expect((f"{t}#{n}", t) for n, t in enumerate(tests))
    progress.set_total(len(tests))
    progress.started()
    for n, test_id in enumerate(tests[:3]):
        clock[0] += [1.0, 10.0, 30.0][n]
        progress.add("passed", nodeid=f"{test_id}#{n}", test_id=test_id, seconds=[1, 10, 30][n])
    line = lines[-1]
    assert "ETA 6m 09s (" in line  # 9 more of each: 9 * 41 s, each group guessed from one test
    progress.add("passed")  # a record without identity (old callers): counted, not timed
    assert progress.done == 4


def test_nothing_left_is_no_time_left():
    eta = EtaModel()
    estimate = eta.estimate(elapsed_s=5.0)
    assert estimate is not None and estimate.seconds == 0.0


def test_a_running_test_counts_with_the_time_it_has_run():
    eta = EtaModel(recorded={"m.py::TestC::test_long": 100.0, "m.py::TestC::test_short": 1.0})
    eta.workers = 2
    eta.expect([("long", "m.py::TestC::test_long"), ("short", "m.py::TestC::test_short")])
    eta.started("long", 0.0)
    eta.started("short", 0.0)
    eta.finished("short", "m.py::TestC::test_short", 1.0)
    estimate = eta.estimate(elapsed_s=60.0)
    assert estimate is not None
    assert estimate.seconds == pytest.approx(40.0, rel=0.05)  # 100 s expected, 60 s run
    overdue = eta.estimate(elapsed_s=150.0)
    assert overdue is not None and 0 < overdue.seconds <= 10.0  # late: a little more to go
