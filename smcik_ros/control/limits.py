"""The command stream's joint limits and joint coordinates, without ROS.

``JointLimits``: per-joint position, velocity and acceleration limits in chain order, from the
URDF, ``velocity_scale``, ``max_acceleration`` and an optional MoveIt ``joint_limits.yaml``
(``limits_for_chain``, ``read_joint_limits_yaml``).

Continuous joints have no position limit; the command lives in the arm's own unwrapped
coordinate and desired values are mapped to the equivalent nearest the command
(``nearest_equivalent``), so the command takes the short way round and never snaps by 2 pi;
the solvers work within +-2 pi (``to_solver_range``).
"""

from dataclasses import dataclass
import math
from pathlib import Path

import numpy as np

from ..errors import ParameterError

__all__ = ['JointLimits', 'commanded', 'limits_for_chain', 'read_joint_limits_yaml',
           'parse_joint_limits_yaml', 'wrap_to_pi', 'nearest_equivalent', 'to_solver_range']


def _readonly(values, dtype=float):
    arr = np.array(values, dtype=dtype)
    arr.setflags(write=False)
    return arr



@dataclass(frozen=True)
class JointLimits:
    """Per-joint limits of the command stream, in chain order.

    names: joint names (n,); lower, upper: (n,) position limits [rad or m] (-inf / inf for
    continuous joints); velocity: (n,) > 0 [rad/s or m/s] (already scaled by velocity_scale);
    acceleration: (n,) > 0 [rad/s^2 or m/s^2]; continuous: (n,) bool.
    """

    names: tuple
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    continuous: np.ndarray

    def __post_init__(self):
        n = len(self.names)
        object.__setattr__(self, 'names', tuple(self.names))
        for field in ('lower', 'upper', 'velocity', 'acceleration'):
            arr = _readonly(getattr(self, field))
            if arr.shape != (n,):
                raise ParameterError(f'joint limits: {field} must have one value per joint '
                                     f'({n}: {", ".join(self.names)}); got shape {arr.shape}')
            object.__setattr__(self, field, arr)
        continuous = _readonly(self.continuous, dtype=bool)
        if continuous.shape != (n,):
            raise ParameterError(f'joint limits: continuous must have {n} entries; got shape '
                                 f'{continuous.shape}')
        object.__setattr__(self, 'continuous', continuous)
        for field in ('velocity', 'acceleration'):
            arr = getattr(self, field)
            bad = ~np.isfinite(arr) | (arr <= 0.0)
            if np.any(bad):
                names = [f'{name} ({value:g})' for name, value, b in
                         zip(self.names, arr, bad) if b]
                raise ParameterError(f'joint limits: {field} limits must be finite and > 0; '
                                     f'got {", ".join(names)}')
        lower = np.where(continuous, -np.inf, self.lower)
        upper = np.where(continuous, np.inf, self.upper)
        bad = ~continuous & (~np.isfinite(lower) | ~np.isfinite(upper) | (lower > upper))
        if np.any(bad):
            names = [f'{name} [{lo:g}, {hi:g}]' for name, lo, hi, b in
                     zip(self.names, lower, upper, bad) if b]
            raise ParameterError(f'joint limits: position limits must be finite with lower <= '
                                 f'upper (continuous joints excepted); got {", ".join(names)}')
        object.__setattr__(self, 'lower', _readonly(lower))
        object.__setattr__(self, 'upper', _readonly(upper))

    @property
    def n(self):
        """Number of joints."""
        return len(self.names)

    def clip(self, q):
        """Return ``q`` (n,) inside the position limits (continuous joints untouched)."""
        return np.minimum(np.maximum(q, self.lower), self.upper)



def wrap_to_pi(x):
    """Return angles [rad] wrapped into [-pi, pi)."""
    return (np.asarray(x, dtype=float) + np.pi) % (2.0 * np.pi) - np.pi


def nearest_equivalent(value, reference, continuous):
    """Return ``value`` with its continuous entries moved by multiples of 2 pi to the
    equivalent nearest ``reference`` (both (n,) [rad]); other entries are unchanged."""
    value = np.asarray(value, dtype=float)
    reference = np.asarray(reference, dtype=float)
    return np.where(continuous, reference + wrap_to_pi(value - reference), value)


def to_solver_range(q, continuous):
    """Return ``q`` with continuous entries wrapped into [-pi, pi) (inside the solver's
    +-2 pi working range); other entries unchanged."""
    q = np.asarray(q, dtype=float)
    return np.where(continuous, wrap_to_pi(q), q)



def commanded(chain):
    """Return the q indices of the commanded joints: the URDF's joints of the chain (with a
    floating base, ``chain.command_index``: the base's six joints are state, never commands)."""
    index = getattr(chain, 'command_index', None)
    return np.arange(chain.nq) if index is None else np.asarray(index, dtype=int)


def limits_for_chain(chain, velocity_scale, max_acceleration, default_velocity_limit=1.0,
                     overrides=None):
    """Return (JointLimits, notes) of a chain's commanded 1-DOF joints (``commanded``).

    Velocity: URDF velocity (``default_velocity_limit`` where the URDF has none), lowered by an
    override's max_velocity, times ``velocity_scale``. Acceleration: ``max_acceleration`` for
    every joint, replaced by an override's max_acceleration. Position: URDF limits, narrowed
    by an override's min/max_position; none for continuous joints. overrides: the dict of
    ``read_joint_limits_yaml`` (None: none). notes: human-readable lines about what was used.
    """
    if chain.nq != chain.nv:
        raise ParameterError(f'the command stream needs 1-DOF joints (revolute, continuous, '
                             f'prismatic); chain {chain.robot_name!r} has ball joints')
    if not (0.0 < velocity_scale <= 1.0):
        raise ParameterError(f'velocity_scale must be in (0, 1]; got {velocity_scale!r}')
    if not (max_acceleration > 0.0 and math.isfinite(max_acceleration)):
        raise ParameterError(f'max_acceleration must be > 0 [rad/s^2 or m/s^2]; got '
                             f'{max_acceleration!r}')
    if not (default_velocity_limit > 0.0 and math.isfinite(default_velocity_limit)):
        raise ParameterError(f'default_velocity_limit must be > 0; got '
                             f'{default_velocity_limit!r}')
    index = commanded(chain)
    names = [chain.joint_names[i] for i in index]
    continuous = np.array(chain.continuous, dtype=bool)[index]
    notes = []
    velocity = np.array(chain.velocity_limits, dtype=float)[index]
    missing = ~np.isfinite(velocity) | (velocity <= 0.0)
    if np.any(missing):
        notes.append(f'URDF gives no velocity limit for '
                     f'{", ".join(n for n, m in zip(names, missing) if m)}: using '
                     f'default_velocity_limit = {default_velocity_limit:g}')
        velocity[missing] = default_velocity_limit
    acceleration = np.full(len(names), float(max_acceleration))
    lower = np.array(chain.lower, dtype=float)[index]
    upper = np.array(chain.upper, dtype=float)[index]
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        notes.append(f'joint limits file: joints not in the chain ignored: {", ".join(unknown)}')
    for j, name in enumerate(names):
        item = overrides.get(name, {})
        if 'velocity' in item:
            if item['velocity'] < velocity[j]:
                velocity[j] = item['velocity']
            elif item['velocity'] > velocity[j] * (1.0 + 1e-9):
                notes.append(f'joint limits file: max_velocity {item["velocity"]:g} of {name} '
                             f'is above the URDF limit {velocity[j]:g}: kept the URDF limit')
        if 'acceleration' in item:
            acceleration[j] = item['acceleration']
        if 'lower' in item and not continuous[j]:
            lower[j] = max(lower[j], item['lower'])
        if 'upper' in item and not continuous[j]:
            upper[j] = min(upper[j], item['upper'])
    limits = JointLimits(names=tuple(names), lower=lower, upper=upper,
                         velocity=velocity * velocity_scale, acceleration=acceleration,
                         continuous=continuous)
    return limits, notes


def read_joint_limits_yaml(path):
    """Return the per-joint overrides of a MoveIt joint_limits.yaml file (see
    ``parse_joint_limits_yaml``); ParameterError when it cannot be read or is malformed."""
    path = Path(path).expanduser()
    where = f'joint_limits_path {str(path)!r}'
    try:
        text = path.read_text()
    except OSError as exc:
        raise ParameterError(f'{where} cannot be read ({exc.strerror or exc}); give a MoveIt '
                             'joint_limits.yaml (joint_limits: <joint>: max_velocity: ...) '
                             'or leave joint_limits_path empty') from None
    return parse_joint_limits_yaml(text, where)


def parse_joint_limits_yaml(text, where='joint limits YAML'):
    """Return {joint: {'velocity', 'acceleration', 'lower', 'upper'}} from MoveIt's
    joint_limits.yaml form.

    Reads ``joint_limits.<joint>``: max_velocity when has_velocity_limits is true,
    max_acceleration when has_acceleration_limits is true, min/max_position when
    has_position_limits is true (other keys, e.g. jerk limits, are ignored). Raises
    ParameterError naming ``where``, the joint and the key on anything malformed.
    """
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ParameterError(f'{where} is not valid YAML: {exc}') from None
    if isinstance(data, dict) and 'joint_limits' not in data and isinstance(
            data.get('robot_description_planning'), dict):
        data = data['robot_description_planning']   # the MoveIt 2 parameter namespace
    if not isinstance(data, dict) or not isinstance(data.get('joint_limits'), dict):
        raise ParameterError(f'{where}: expected a mapping with a joint_limits: key holding '
                             f'one mapping per joint (MoveIt form); got {type(data).__name__}'
                             + (f' with keys {sorted(data)}' if isinstance(data, dict) else ''))
    out = {}
    for joint, entry in data['joint_limits'].items():
        if not isinstance(entry, dict):
            raise ParameterError(f'{where}: joint_limits.{joint} must be a mapping; got '
                                 f'{entry!r}')
        item = {}
        for flag, key, name, positive in (
                ('has_velocity_limits', 'max_velocity', 'velocity', True),
                ('has_acceleration_limits', 'max_acceleration', 'acceleration', True),
                ('has_position_limits', 'min_position', 'lower', False),
                ('has_position_limits', 'max_position', 'upper', False)):
            enabled = entry.get(flag, False)
            if not isinstance(enabled, bool):
                raise ParameterError(f'{where}: joint_limits.{joint}.{flag} must be true or '
                                     f'false; got {enabled!r}')
            if not enabled:
                continue
            if key not in entry:
                raise ParameterError(f'{where}: joint_limits.{joint} has {flag}: true but no '
                                     f'{key}')
            value = entry[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value) or (positive and value <= 0.0):
                raise ParameterError(f'{where}: joint_limits.{joint}.{key} must be a finite '
                                     f'number{" > 0" if positive else ""}; got {value!r}')
            item[name] = float(value)
        if 'lower' in item and 'upper' in item and item['lower'] > item['upper']:
            raise ParameterError(f'{where}: joint_limits.{joint}: min_position '
                                 f'{item["lower"]:g} > max_position {item["upper"]:g}')
        out[str(joint)] = item
    return out
