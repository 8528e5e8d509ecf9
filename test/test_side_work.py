"""SideWork: jobs run between control ticks when they fit, oldest first, never starved."""

import pytest

from smcik_ros.control.side_work import SideWork


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def make(cost=0.005, **kwargs):
    """Return (SideWork, clock, ran): jobs 'a' and 'b' each take ``cost`` [s] of the clock."""
    clock = Clock()
    ran = []
    work = SideWork(clock=clock, **kwargs)
    for name in ('a', 'b'):
        def job(name=name):
            ran.append(name)
            clock.t += cost
        work.add(name, job)
    return work, clock, ran


def test_a_job_runs_once_per_request_and_learns_its_cost():
    work, clock, ran = make()
    assert work.run(lambda: 0.0) == [] and ran == []
    work.request('a')
    work.request('a')
    assert work.pending == ('a',)
    assert work.run(lambda: 0.0) == []          # not even the margin is left
    assert work.run(lambda: 0.002) == ['a']    # cost unknown (0) + margin: it runs
    assert work.cost['a'] == pytest.approx(0.005) and work.pending == ()
    assert work.run(lambda: 1.0) == [] and ran == ['a']
    with pytest.raises(KeyError, match="unknown side job 'c'; jobs: a, b"):
        work.request('c')


def test_a_job_that_does_not_fit_before_the_next_tick_waits_for_one_that_does():
    work, clock, ran = make(margin=0.001, max_wait=0.5)
    work.request('a')
    work.run(lambda: None)                      # learns 5 ms
    work.request('a')
    work.request('b')
    left = [0.004]                              # 4 ms to the next tick: 'a' (5 + 1 ms) waits
    assert work.run(lambda: left[0]) == ['b'] and work.deferred['a'] == 1
    clock.t += 0.01
    left[0] = 0.006                              # just fits
    assert work.run(lambda: left[0]) == ['a'] and ran == ['a', 'b', 'a']


def test_a_job_that_never_fits_runs_after_max_wait():
    work, clock, ran = make(max_wait=0.5)
    work.request('a')
    work.run(lambda: None)
    work.request('a')
    for _ in range(49):                         # 2 ms periods: the 5 ms job never fits
        clock.t += 0.002
        assert work.run(lambda: 0.002) == []
    clock.t += 0.5
    assert work.run(lambda: 0.002) == ['a']


def test_cancel_drops_a_request_and_settings_are_validated():
    work, _, ran = make()
    work.request('b')
    work.cancel('b')
    work.cancel('b')
    assert work.run(lambda: None) == [] and ran == []
    with pytest.raises(ValueError, match='smoothing in'):
        SideWork(smoothing=0.0)
