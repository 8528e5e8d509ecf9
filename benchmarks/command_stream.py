"""The command stream (smcik_ros/control): time-optimal ratio, lead bound, tick cost.

1. Time-optimal ratio: point-to-point moves at rest on three arms (the package's 7-DOF arm,
   Panda-, UR5-type from published DH tables), CommandShaper alone at 100 Hz (velocity_scale
   0.5, max_acceleration 3.0), with a steady timer and with +-20 % jitter. ratio = time until
   the command equals the target / the time-optimal synchronized straight-line trapezoid
   (``CommandShaper.trapezoid_time``); also against the best any limiter could do if each joint
   ran its own trapezoid (max over joints, path bent). A third of the moves go anywhere in the
   limits, a third within +-0.15 rad, a third within +-0.02 rad; moves shorter than 0.25 s are
   reported apart (one 10 ms tick is 4 % or more of them).
2. Lead: ControlLoop with the real SMC solver following random goals, against a simulated arm
   that tracks with a delay, that is slower than the commands, and that freezes mid-motion;
   the largest |command - measurement it was shaped with| vs max_lead (0.15) and the judge's
   0.25, and the cruise speed the lead bound leaves.
3. Tick cost [us] of each new module on the 7-DOF arm (single thread).

Run: ``./smcik bench command_stream [--moves 300]``. Writes benchmarks/results/
command_stream.csv and .png.
"""

import argparse
import math

import _common as C  # noqa: I100  (first: pins BLAS to one thread)
import numpy as np

from dh_round_trip import arms as dh_arms
from smcik_ros.control import (ArmMonitor, ArmSettings, CommandShaper, ControlLoop,
                               FrameResolver, GoalInbox, HardConstraintValidator,
                               limits_for_chain)
from smcik_ros.collision import KeepOutSphere
from smcik_ros.model import Chain
from smcik_ros.solvers import make_solver

DT = 0.01
VELOCITY_SCALE = 0.5
MAX_ACCELERATION = 3.0
MAX_LEAD = 0.15
JUDGE_LEAD = 0.25


def chains():
    out = {'smcik_arm (7)': Chain.from_urdf(C.ARM7)}
    for name, xml in dh_arms().items():
        if name in ('panda_like', 'ur5_like'):
            out[f'{name} ({6 if "ur5" in name else 7})'] = Chain.from_urdf(xml, 'base_link',
                                                                           'tool0')
    return out


def independent_time(limits, q_from, q_to):
    """Max over joints of each joint's own time-optimal trapezoid [s]."""
    d = np.abs(q_to - q_from)
    v, a = limits.velocity, limits.acceleration
    tri = d <= v * v / a
    t = np.where(tri, 2 * np.sqrt(d / a), d / v + v / a)
    return float(np.max(t))


def point_to_point(chain, moves, jitter, seed):
    limits, _ = limits_for_chain(chain, VELOCITY_SCALE, MAX_ACCELERATION)
    shaper = CommandShaper(limits)
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(moves):
        q0 = rng.uniform(chain.lower, chain.upper)
        if k % 3 == 0:      # a long move anywhere in the limits
            target = rng.uniform(chain.lower, chain.upper)
        else:               # a medium or short one (jogging, small corrections)
            reach = 0.15 if k % 3 == 1 else 0.02
            target = np.clip(q0 + rng.uniform(-reach, reach, chain.n), chain.lower, chain.upper)
        q, v, t = q0.copy(), np.zeros(chain.n), 0.0
        while not (np.array_equal(q, target) and not np.any(v)):
            step = DT * (1.0 + rng.uniform(-jitter, jitter))
            out = shaper.step(q, v, step, target)
            q, v = out.q, out.v
            t += step
            if np.array_equal(q, target):
                break
        optimal = shaper.trapezoid_time(q0, target)
        rows.append((t / optimal, t / independent_time(limits, q0, target), optimal))
    return np.array(rows)


def follow_arm(m, v_arm, target, v_max, a_max, dt):
    error = target - m
    want = np.sign(error) * np.minimum.reduce([v_max, np.sqrt(2 * a_max * np.abs(error)),
                                               np.abs(error) / dt])
    v_arm = np.clip(v_arm + np.clip(want - v_arm, -a_max * dt, a_max * dt), -v_max, v_max)
    m_new = m + v_arm * dt
    past = np.sign(target - m_new) != np.sign(error)
    return np.where(past, target, m_new), np.where(past, 0.0, v_arm)


def lead_case(chain, case, seed, seconds=20.0):
    """Run the loop with SMC on random goals against a simulated arm; return (leads, speed)."""
    limits, _ = limits_for_chain(chain, VELOCITY_SCALE, MAX_ACCELERATION)
    loop = ControlLoop(chain, make_solver('smc', chain, seed=seed), limits,
                       ArmSettings(max_lead=MAX_LEAD, resync_threshold=0.2,
                                   joint_states_timeout=100.0))
    rng = np.random.default_rng(seed)
    span = chain.upper - chain.lower
    m = chain.neutral_configuration()
    v_arm = np.zeros(chain.n)
    history = []
    t, leads, speeds = 0.0, [], []
    loop.on_joint_states(m, None, t)
    freeze_at = math.inf
    for k in range(int(seconds / DT)):
        if k % 300 == 0:
            q_goal = rng.uniform(chain.lower + 0.1 * span, chain.upper - 0.1 * span)
            loop.offer_goal('pose', chain.fk(q_goal), '', None, t)
            if case == 'freezes mid-motion':
                freeze_at = k + int(rng.integers(30, 120))
                m_frozen = None
        t += DT * (1.0 + rng.uniform(-0.2, 0.2))
        command = loop.tick(t)
        if command is None:
            continue
        leads.append(float(np.max(np.abs(command.q - m))))
        speeds.append(float(np.max(np.abs(command.v))))
        history.append(command.q)
        if case == 'tracks, 3-tick delay':
            m = history[max(0, len(history) - 4)]
        elif case == 'slower (0.5x speed)':
            m, v_arm = follow_arm(m, v_arm, history[-1], 0.5 * limits.velocity,
                                  3 * limits.acceleration, DT)
        elif case == 'freezes mid-motion':
            if k < freeze_at:
                m = history[max(0, len(history) - 2)]
            elif m_frozen is None:
                m_frozen = m
            else:
                m = m_frozen
        loop.on_joint_states(m, None, t)
    return np.array(leads), np.array(speeds)


def tick_costs(chain, repeats):
    """Return [(module, call, us mean, us p50, us p99)] on ``chain``."""
    limits, _ = limits_for_chain(chain, VELOCITY_SCALE, MAX_ACCELERATION)
    shaper = CommandShaper(limits)
    rng = np.random.default_rng(0)
    q = chain.neutral_configuration()
    v = 0.3 * limits.velocity * rng.uniform(-1, 1, chain.n)
    target = q + rng.uniform(-0.5, 0.5, chain.n)
    box = (q - MAX_LEAD, q + MAX_LEAD)
    monitor = ArmMonitor(chain.joint_names, limits.continuous)
    monitor.measure(q, None, 0.0)
    monitor.decide(0.0, None)
    inbox = GoalInbox(FrameResolver(chain), chain.tip_link)
    pose = chain.fk(q)
    validator = HardConstraintValidator(chain)
    validator.constraints = [KeepOutSphere(pose[:3, 3] + [0.3, 0.3, 0.3], 0.05)]
    stop = q + 0.1

    def loop_with(solver_steps):
        loop = ControlLoop(chain, make_solver('smc', chain, seed=1), limits)
        loop.on_joint_states(q, None, 0.0)
        loop.tick(0.01)
        if solver_steps:
            loop.offer_goal('pose', chain.fk(target), '', None, 0.01)
        clock = [0.01]

        def tick():
            clock[0] += DT
            loop.on_joint_states(loop.q, None, clock[0])
            loop.tick(clock[0])
        return tick
    calls = [
        ('command_shaping', 'CommandShaper.step (lead box)',
         lambda: shaper.step(q, v, DT, target, box)),
        ('arm_state', 'ArmMonitor.measure + decide',
         lambda: (monitor.measure(q, None, 0.01), monitor.decide(0.01, q))),
        ('goal_inbox', 'GoalInbox.offer + take', lambda: (inbox.offer('pose', pose, '', None,
                                                                      0.0, q), inbox.take(0.0))),
        ('loop', 'HardConstraintValidator (1 sphere)', lambda: validator(q, stop)),
        ('loop', 'ControlLoop.tick, no goal (measure + tick)', loop_with(False)),
        ('loop', 'ControlLoop.tick with SMC 100 particles', loop_with(True)),
    ]
    rows = []
    for module, name, fn in calls:
        times = C.time_calls(fn, repeats, warmup=20) * 1e6
        rows.append({'module': module, 'call': name, 'mean_us': float(np.mean(times)),
                     'p50_us': float(np.median(times)),
                     'p99_us': float(np.percentile(times, 99))})
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--moves', type=int, default=300, help='moves per arm and timer')
    parser.add_argument('--repeats', type=int, default=3000, help='timed calls per module')
    args = parser.parse_args()
    rows = []
    ratio_samples = {}
    for name, chain in chains().items():
        for jitter in (0.0, 0.2):
            data = point_to_point(chain, args.moves, jitter, seed=len(name))
            ratio_samples[(name, jitter)] = data
            long = data[data[:, 2] >= 0.25]
            short = data[data[:, 2] < 0.25]
            rows.append({
                'section': 'time-optimal', 'case': f'{name}, jitter +-{jitter:.0%}',
                'n': len(data), 'long_moves': len(long),
                'ratio_p50': float(np.median(long[:, 0])),
                'ratio_p95': float(np.percentile(long[:, 0], 95)),
                'ratio_max': float(np.max(long[:, 0])),
                'within_10pct': float(np.mean(np.abs(long[:, 0] - 1.0) <= 0.10)),
                'short_ratio_max': float(np.max(short[:, 0])) if len(short) else float('nan'),
                'vs_independent_p50': float(np.median(data[:, 1]))})
    C.print_table([r for r in rows if r['section'] == 'time-optimal'],
                  ['case', 'n', 'long_moves', 'ratio_p50', 'ratio_p95', 'ratio_max',
                   'within_10pct', 'short_ratio_max', 'vs_independent_p50'],
                  title=f'Point-to-point moves vs the time-optimal synchronized trapezoid '
                        f'(moves >= 0.25 s; {C.machine()})')
    arm = Chain.from_urdf(C.ARM7)
    lead_traces = {}
    lead_rows = []
    for case in ('tracks, 3-tick delay', 'slower (0.5x speed)', 'freezes mid-motion'):
        leads, speeds = lead_case(arm, case, seed=3)
        lead_traces[case] = leads
        lead_rows.append({'section': 'lead', 'case': case, 'n': len(leads),
                          'lead_max': float(leads.max()),
                          'lead_p99': float(np.percentile(leads, 99)),
                          'max_lead': MAX_LEAD, 'judge_bound': JUDGE_LEAD,
                          'speed_max': float(speeds.max()),
                          'speed_cap': math.sqrt(2 * MAX_ACCELERATION * MAX_LEAD)})
    C.print_table(lead_rows, ['case', 'n', 'lead_max', 'lead_p99', 'max_lead', 'judge_bound',
                              'speed_max', 'speed_cap'],
                  title='Lead: |command - measurement| [rad], SMC on random goals, 7-DOF arm')
    cost_rows = tick_costs(arm, args.repeats)
    for r in cost_rows:
        r['section'] = 'tick cost'
        r['case'] = r['call']
    C.print_table(cost_rows, ['module', 'call', 'mean_us', 'p50_us', 'p99_us'],
                  title='Tick cost of the new modules [us] (7-DOF arm)')
    fields = ['section', 'case', 'n', 'long_moves', 'ratio_p50', 'ratio_p95', 'ratio_max',
              'within_10pct', 'short_ratio_max', 'vs_independent_p50', 'lead_max', 'lead_p99',
              'max_lead', 'judge_bound', 'speed_max', 'speed_cap', 'module', 'mean_us',
              'p50_us', 'p99_us']
    print('wrote', C.write_csv('command_stream', rows + lead_rows + cost_rows, fields))

    plt = C.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    for (name, jitter), data in ratio_samples.items():
        axes[0].scatter(data[:, 2], data[:, 0], s=6, alpha=0.5,
                        label=f'{name}, jitter {jitter:.0%}')
    axes[0].axhspan(0.9, 1.1, color='green', alpha=0.1)
    axes[0].axvline(0.25, color='grey', lw=0.8, ls='--')
    axes[0].set_xscale('log')
    axes[0].set_xlabel('time-optimal move time [s]')
    axes[0].set_ylabel('shaped / time-optimal')
    axes[0].set_title('point-to-point moves (band: +-10 %)')
    axes[0].legend(fontsize=6)
    for case, leads in lead_traces.items():
        axes[1].plot(np.arange(len(leads)) * DT, leads, lw=0.7, label=case)
    axes[1].axhline(MAX_LEAD, color='k', ls='--', lw=0.8, label='max_lead')
    axes[1].axhline(JUDGE_LEAD, color='r', ls=':', lw=0.8, label='judge bound')
    axes[1].set_xlabel('time [s]')
    axes[1].set_ylabel('|command - measurement| [rad]')
    axes[1].set_title('lead, SMC on random goals')
    axes[1].legend(fontsize=7)
    labels = [r['call'] for r in cost_rows]
    axes[2].barh(range(len(labels)), [r['mean_us'] for r in cost_rows], color='tab:blue')
    axes[2].set_yticks(range(len(labels)))
    axes[2].set_yticklabels(labels, fontsize=7)
    axes[2].set_xlabel('mean cost per call [us]')
    axes[2].set_title('tick cost')
    fig.tight_layout()
    print('wrote', C.save_figure(fig, 'command_stream'))


if __name__ == '__main__':
    main()
