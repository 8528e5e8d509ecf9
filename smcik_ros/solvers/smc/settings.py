"""Settings of the SMC IK filter: one frozen dataclass, field names are the ROS parameters."""

from dataclasses import dataclass

from ..base import SolverSettings, _check, check_fields

__all__ = ['SmcSettings', 'particle_count', 'WHOLE_FIGURE_DIMENSIONS']

# A state of more tangent dimensions than this (a humanoid with its floating base: Talos 34)
# gets FIGURE_PARTICLES by default, not ARM_PARTICLES: a step costs about N x nv, and a
# Talos whole-body step took 87 ms at 100 particles (offline, idle), so the node made 3-5
# steps a second on two cores; three goals it had missed, replayed offline at 50: 4/4, 2/3,
# 3/3 reached (4/4, 1/3, 3/3 at 100) at 50-78 % of the wall time (docs/smc.md).
WHOLE_FIGURE_DIMENSIONS = 20
ARM_PARTICLES = 100
FIGURE_PARTICLES = 50


def particle_count(settings, nv):
    """Return N: ``settings.num_particles``, or for 0 (the default) ARM_PARTICLES, or
    FIGURE_PARTICLES for a state of more than WHOLE_FIGURE_DIMENSIONS tangent entries nv."""
    if settings.num_particles:
        return int(settings.num_particles)
    return FIGURE_PARTICLES if nv > WHOLE_FIGURE_DIMENSIONS else ARM_PARTICLES


@dataclass(frozen=True)
class SmcSettings(SolverSettings):
    """Settings of the SMC IK filter (field names are the ROS parameter names)."""

    num_particles: int = 0              # N, particles; 0: 100, or 50 over 20 state dims
    seed: int = -1                      # random seed; -1: fresh entropy each construction
    joint_noise: float = 0.1            # [rad] std of the revolute random walk per iteration
    prismatic_noise: float = 0.02       # [m] std of the prismatic random walk (less if slow)
    ball_noise: float = 0.1             # [rad] ball rotation-angle std per axis (2x eq. 17's)
    joint_noise_per_joint: tuple = ()   # [rad or m] one std per 1-DOF joint; () = the above
    ball_noise_per_axis: tuple = ()     # [rad] 3 stds per ball joint (QuTem diag); () = above
    min_noise_scale: float = 0.01       # smallest per-particle noise factor (log-uniform to 1)
    sigma_position: float = 0.01        # [m] task noise std, position (Sigma_z) of array goals
    sigma_orientation: float = 0.05     # [rad] task noise std, orientation (Sigma_z)
    anneal_initial: float = 10.0        # Sigma_z std multiplier when a new goal arrives
    anneal_rate: float = 0.8            # per-iteration factor on that multiplier (down to 1)
    smoothing_alpha: float = 1.0        # eq. 15 interpolation factor (1: no smoothing, no lag)
    resample_threshold: float = 0.5     # resample when ESS < threshold * N
    max_redraws: int = 3                # accept/reject redraws per iteration
    refine_count: int = 4               # best particles refined per iteration (0: off)
    refine_steps: int = 3               # damped least-squares steps per refined particle
    refine_damping: float = 1e-4        # Levenberg-Marquardt damping floor
    refine_min_cost: float = 1e-9       # skip refinement while the best cost is below this
    max_step: float = 0.5               # [rad or m] largest joint change of one refinement step
    restart_after: int = 4              # iterations without enough progress before re-seeding
    stall_tolerance: float = 0.1        # 'progress' = best cost down by this fraction
    restart_fraction: float = 1.0       # share of particles re-seeded on a restart
    online_restarts: bool = True        # also re-seed in online use (the estimate's stays)
    restart_min_cost: float = 0.01      # no restart once the best task cost is below this
    online_restart_limit: int = 20      # online: restarts per still goal, then rest (0: no limit)
    init_uniform_fraction: float = 0.5  # solve(): share of particles drawn uniformly at start
    seed_rows: int = 8                  # solve(): seed + draws refined one by one first (0: off)
    seed_steps: int = 30                # solve(): LM steps per row of that first stage
    keep_map: bool = True               # carry the estimate's particle over without noise
    goal_change_threshold: float = 3.0  # goal moves > this many sigmas re-arm the filter
    solution_tolerance_position: float = 0.001      # [m] 'satisfies the goal' (online)
    solution_tolerance_orientation: float = 0.01    # [rad] 'satisfies the goal' (online)
    minimal_motion: bool = True         # prefer the solution nearest the reference (off: MAP)
    motion_sigma: float = 1.0           # [rad] std of the motion prior N(x_ref, Sigma_motion)
    nullspace_gain: float = 1.0         # refinement's pull to x_ref in the task null space
    reseed_fraction: float = 0.5        # share of particles drawn around x_ref on a new goal
    search_count: int = 32              # searchers of the nearest branch on a new goal (0: off)
    search_iterations: int = 8          # iterations per search window (repeated while useful)
    search_batch: int = 0               # searchers refined per iteration (0: all)
    branch_hold: bool = True            # online: stay on the estimate's branch (needs keep_map)
    branch_jump: float = 0.5            # [rad] 'another branch' = a joint differs by more
    recovery_iterations: int = 300      # iterations the branch left out of reach is kept
    hold_patience: int = 4              # iterations without progress before leaving the branch

    def validate(self):
        check_fields(self, '>= 1', 'refine_steps', 'seed_steps', 'hold_patience', 'anneal_initial')
        check_fields(self, '>= 0', 'num_particles', note=' (0: by the state\'s size)')
        check_fields(self, '>= -1', 'seed', note=' (-1: fresh entropy)')
        check_fields(self, '> 0', 'joint_noise', 'prismatic_noise', 'ball_noise', 'sigma_position',
                     'sigma_orientation', 'solution_tolerance_position',
                     'solution_tolerance_orientation', 'motion_sigma', 'max_step', 'branch_jump')
        check_fields(self, '(0, 1]', 'min_noise_scale', 'anneal_rate', 'smoothing_alpha')
        check_fields(self, '[0, 1]', 'resample_threshold', 'restart_fraction',
                     'init_uniform_fraction', 'nullspace_gain')
        check_fields(self, '[0, 1)', 'stall_tolerance', 'reseed_fraction')
        check_fields(self, '>= 0', 'max_redraws', 'refine_damping', 'refine_min_cost',
                     'restart_min_cost', 'goal_change_threshold', 'search_iterations',
                     'recovery_iterations')
        check_fields(self, '>= 0', 'restart_after', 'seed_rows', 'search_count', note=' (0: off)')
        check_fields(self, '>= 0', 'search_batch', note=' (0: every searcher each iteration)')
        check_fields(self, '>= 0', 'online_restart_limit', note=' (0: no limit)')
        fewest = self.num_particles or FIGURE_PARTICLES
        _check(0 <= self.refine_count <= fewest,
               f'refine_count must be in [0, num_particles={fewest}]; got {self.refine_count}')
        _check(self.keep_map or not self.branch_hold,
               'branch_hold needs keep_map (the held particle is carried over without noise); '
               'set keep_map: true or branch_hold: false')
        for v in self.joint_noise_per_joint + self.ball_noise_per_axis:
            _check(v > 0.0, f'per-joint noise values must be > 0; got {v}')
