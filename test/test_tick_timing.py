"""Late control ticks (smcik_ros.control.tick_timing.TickTiming): counted exactly, and a
warning only when more than the allowed share of a window's ticks came late."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from smcik_ros.control.tick_timing import LATE_PERIODS, TickTiming


def _feed(timing, times):
    return [timing.tick(t) for t in times]


@given(rate=st.sampled_from([50.0, 100.0, 500.0, 1000.0]),
       gaps=st.lists(st.floats(0.2, 6.0), min_size=1, max_size=400))
@settings(max_examples=200, deadline=None)
def test_late_ticks_are_the_periods_of_one_and_a_half_or_more(rate, gaps):
    """Any sequence of periods (in timer periods): late_ticks counts those >= 1.5, the kept
    periods are the sequence's, the longest is their maximum."""
    times = np.concatenate([[10.0], 10.0 + np.cumsum(np.array(gaps) / rate)])
    timing = TickTiming(rate)
    _feed(timing, times)
    periods = np.diff(times)
    assert timing.late_ticks == int(np.sum(periods * rate >= LATE_PERIODS))
    assert np.allclose(list(timing.periods), periods[-1000:])
    assert timing.max_period == pytest.approx(periods[-1000:].max())


@given(rate=st.sampled_from([100.0, 500.0]), seed=st.integers(0, 2 ** 32 - 1),
       late_share=st.floats(0.0, 0.3))
@settings(max_examples=100, deadline=None)
def test_a_warning_means_the_share_was_exceeded_within_the_window(rate, seed, late_share):
    """Ticks at the rate with a random share of 2-period gaps: every warning comes on a late
    tick while more than 5 % of the last second's expected ticks (and at least 3) came late;
    and when that holds on a late tick, a warning comes."""
    rng = np.random.default_rng(seed)
    periods = np.where(rng.random(3000) < late_share, 2.0, 1.0) / rate
    times = 5.0 + np.concatenate([[0.0], np.cumsum(periods)])
    timing = TickTiming(rate, grace=0.0)
    out = _feed(timing, times)
    late_at = times[1:][periods * rate >= LATE_PERIODS]
    for k, (now, text) in enumerate(zip(times[1:], out[1:])):
        is_late = periods[k] * rate >= LATE_PERIODS
        recent = np.sum((late_at > now - 1.0) & (late_at <= now))
        due = is_late and recent >= max(3, 0.05 * rate)
        assert (text is not None) == due, (k, recent)
        if text is not None:
            assert f'{recent} of the last 1 s' in text and f'rate_hz {rate:g}' in text


def test_regular_ticks_never_warn_and_the_rate_can_change():
    timing = TickTiming(100.0, grace=0.0)
    times = np.arange(0.0, 10.0, 0.01)
    assert _feed(timing, times) == [None] * len(times)
    assert timing.late_ticks == 0 and timing.max_period == pytest.approx(0.01)
    timing.rate = 500.0         # the same 10 ms periods are five periods at 500 Hz
    out = _feed(timing, 10.0 + np.arange(1, 40) * 0.01)
    assert timing.late_ticks == 39
    assert out[:24] == [None] * 24 and out[24] is not None and 'lower it' in out[24]


@given(rate=st.sampled_from([100.0, 500.0]), grace=st.floats(0.5, 3.0),
       seed=st.integers(0, 2 ** 32 - 1))
@settings(max_examples=50, deadline=None)
def test_start_up_grace_counts_late_ticks_and_warns_only_after_it(rate, grace, seed):
    """Every tick late (3 periods): those within ``grace`` of the first tick are counted but
    never warned about nor carried into the window; the first warning comes once the window
    after the grace holds enough late ticks of its own."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(0.0, 100.0)
    times = start + np.arange(0, int(2 * (grace + 1.0) * rate / 3.0)) * 3.0 / rate
    timing = TickTiming(rate, grace=grace)
    out = _feed(timing, times)
    assert timing.late_ticks == len(times) - 1
    warned = [t for t, text in zip(times, out) if text is not None]
    assert warned and min(warned) >= start + grace
    after = times[(times >= start + grace) & (times <= warned[0])]
    assert max(3, 0.05 * rate) <= len(after) <= max(3, 0.05 * rate) + 1
