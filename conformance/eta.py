"""How long a run has to go, from what each remaining test is expected to take.

The mean rate so far (tests per second) misleads on upstream's files: most tests take
milliseconds, a few gradient checks take minutes, and they cluster (test_modules' gradcheck
tail), so a run that has done 95% of its tests in 20 minutes may have 15 minutes left.
:class:`EtaModel` instead sums the expected time of the tests still to run:

- a test an earlier run of the device recorded (``--shard-durations``, the last nightly,
  the run being resumed) is expected to take its recorded time, scaled by how this run's finished tests
  compare with their own recorded times (a slower device, a busier machine);
- any other test takes the mean of the tests most like it that finished in this run, else
  of those recorded: the same test name but for its dtypes, else the same class, else the
  same file, else all (groups read off the tests' nodeids: the process that prints the
  line, an xdist controller, never imports torch).
  Such estimates carry their spread, so the ETA widens to a range (``ETA 12m (8m-20m)``)
  when much of what is left is guessed, and narrows as the run learns its templates.

The remaining time is spread over the workers at the rate this run turns test time into
wall time (which counts the workers' overheads; a test still running counts with the time
it has run so far, and is expected to run for what its estimate has left), and is never
less than the longest test left: at the end of a run one worker finishes the heavy tail
alone.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Eta", "EtaModel"]

#: Seconds of evidence on each side before this run's speed replaces the recorded one.
_CALIBRATION_PRIOR_S = 30.0
#: A range is shown when the estimated part may move the ETA by more than this share.
_SHOW_RANGE = 0.1
#: z of the two-sided 90% interval around an estimate.
_Z90 = 1.645


@dataclass(frozen=True)
class Eta:
    """Seconds to go, and the range the guessed part of them allows."""

    seconds: float
    low: float
    high: float
    #: Share of the remaining test time that was estimated rather than recorded.
    estimated_share: float

    @property
    def is_range(self) -> bool:
        return self.seconds > 0 and (self.high - self.low) > 2 * _SHOW_RANGE * self.seconds


@dataclass
class _Moments:
    """Count, sum and sum of squares: a group's mean and spread, updated as tests finish."""

    count: int = 0
    total: float = 0.0
    squares: float = 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.squares += seconds * seconds

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    @property
    def variance(self) -> float:
        if self.count < 2:
            return self.mean**2  # one sample: as uncertain as its own size
        mean = self.mean
        return max(0.0, self.squares / self.count - mean * mean) * self.count / (self.count - 1)


#: Trailing dtype tokens of a test name (``_float32``, ``_complex64_float64``).
_DTYPES = re.compile(
    r"(?:_(?:bool|u?int(?:8|16|32|64)|b?float(?:16|32|64)|complex(?:32|64|128)|float8\w*|half))+$"
)


@functools.lru_cache(maxsize=1 << 18)
def _groups(test_id: str) -> tuple[str, str, str, str]:
    """The groups a test counts in, most specific first: its name but for the dtypes, its
    class, its file, all tests."""
    file, _, rest = test_id.partition("::")
    cls, _, name = rest.rpartition("::")
    stem = _DTYPES.sub("", name)
    return f"{file}::{cls}::{stem}", f"{file}::{cls}", file, ""


@dataclass
class EtaModel:
    """Expected time of the tests a run still has to run (see the module's docstring)."""

    #: Seconds an earlier run recorded, by the key tests are expected under (the progress
    #: line keys them by nodeid, the benchmark by test_id).
    recorded: dict[str, float] = field(default_factory=dict)
    workers: int = 1
    _remaining: dict[str, str] = field(default_factory=dict)  # nodeid -> test_id
    _running: dict[str, float] = field(default_factory=dict)  # nodeid -> when it started
    _observed: dict[str, _Moments] = field(default_factory=lambda: defaultdict(_Moments))
    _recorded_groups: dict[str, _Moments] | None = None
    _done_s: float = 0.0  # this run's test time so far
    _matched_now_s: float = 0.0  # of it, the tests with a recorded time...
    _matched_then_s: float = 0.0  # ... and what was recorded for them

    def expect(self, tests: Iterable[tuple[str, str]]) -> None:
        """Tests this run will run, as (nodeid, test_id); repeats are ignored."""
        for nodeid, test_id in tests:
            self._remaining.setdefault(nodeid, test_id)

    def started(self, nodeid: str, at_s: float) -> None:
        """A test started ``at_s`` seconds into the run (the clock ``estimate`` is given)."""
        if nodeid in self._remaining:
            self._running[nodeid] = at_s

    def finished(self, nodeid: str, test_id: str, seconds: float) -> None:
        """A test of this run finished after ``seconds``."""
        self._remaining.pop(nodeid, None)
        self._running.pop(nodeid, None)
        seconds = max(0.0, seconds)
        self._done_s += seconds
        for key in _groups(test_id):
            self._observed[key].add(seconds)
        then = self.recorded.get(test_id)
        if then is not None:
            self._matched_now_s += seconds
            self._matched_then_s += then

    @property
    def remaining(self) -> int:
        return len(self._remaining)

    @property
    def speed(self) -> float:
        """This run's time over the recorded time of the same tests, drawn towards 1 until
        enough of them finished to say otherwise."""
        return (self._matched_now_s + _CALIBRATION_PRIOR_S) / (
            self._matched_then_s + _CALIBRATION_PRIOR_S
        )

    def estimate(self, elapsed_s: float) -> Eta | None:
        """Wall seconds to go ``elapsed_s`` after the first test started; None when nothing
        is known to estimate from (no recorded time and no test finished yet)."""
        if not self._remaining:
            return Eta(0.0, 0.0, 0.0, 0.0)
        speed = self.speed
        recorded = self.recorded
        known = guessed = variance = longest = 0.0
        running_s = 0.0  # time the running tests have run so far
        for nodeid, test_id in self._remaining.items():
            then = recorded.get(test_id)
            if then is not None:
                seconds = then * speed
            else:
                group = self._closest_group(test_id)
                if group is None:
                    return None
                moments, scale = group
                seconds = moments.mean * scale
                # The test's own spread, and the uncertainty of the mean it is guessed from.
                spread = moments.variance * scale * scale
                variance += spread * (1 + 1 / moments.count)
            started = self._running.get(nodeid)
            if started is not None:
                ran = max(0.0, elapsed_s - started)
                running_s += ran
                # Running longer than expected: at least a little more to go.
                seconds = max(seconds - ran, 0.1 * seconds)
            if then is not None:
                known += seconds
            else:
                guessed += seconds
            longest = max(longest, seconds)
        work = known + guessed
        wall_per_work = self._wall_per_work(elapsed_s, running_s)
        margin = _Z90 * math.sqrt(variance)

        def wall(test_seconds: float) -> float:
            return max(test_seconds * wall_per_work, longest)

        return Eta(
            seconds=wall(work),
            low=wall(max(known, work - margin)),
            high=wall(work + margin),
            estimated_share=guessed / work if work > 0 else 0.0,
        )

    def _wall_per_work(self, elapsed_s: float, running_s: float) -> float:
        """Wall seconds per second of test time: this run's (finished tests and the running
        ones so far), once it has done some work, else one over the workers (every worker
        busy, no overhead)."""
        ideal = 1.0 / max(1, self.workers)
        busy = self._done_s + running_s
        if busy <= 0 or elapsed_s <= 0:
            return ideal
        return max(ideal, elapsed_s / busy)

    def _closest_group(self, test_id: str) -> tuple[_Moments, float] | None:
        """The most specific group with data: this run's finished tests first (its own
        device and machine), then the recorded ones scaled by the run's speed."""
        keys = _groups(test_id)
        for key in keys:
            moments = self._observed.get(key)
            if moments is not None and moments.count:
                return moments, 1.0
        recorded = self._recorded_by_group()
        for key in keys:
            moments = recorded.get(key)
            if moments is not None and moments.count:
                return moments, self.speed
        return None

    def _recorded_by_group(self) -> dict[str, _Moments]:
        if self._recorded_groups is None:
            groups: dict[str, _Moments] = defaultdict(_Moments)
            for test_id, seconds in self.recorded.items():
                for key in _groups(test_id):
                    groups[key].add(seconds)
            self._recorded_groups = dict(groups)
        return self._recorded_groups
