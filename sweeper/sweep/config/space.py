"""The search space: parsed once from the YAML grammar into Optuna distributions and declared conditions.

Grammar (the one users know from Hydra's Optuna sweeper, parsed by Hydra's own override parser):

* ``choice(a, b, c)``            -> categorical
* ``range(start, stop[, step])`` -> Hydra's meaning for every sampler: ``stop`` excluded
* ``interval(a, b)``             -> continuous (integer when both bounds are written as integers)
* ``tag(log, interval(a, b))``   -> log scale
* a plain value                  -> fixed, not sampled

Conditions (``conditions: {knobs.prefetch_factor: "knobs.num_workers > 0"}``) make a knob exist only when an
expression over the other knobs holds; an inactive knob is set to ``null``. Constraints (``constraints: [...]``)
are expressions every launched configuration must satisfy; a configuration breaking one is skipped before launch.
The same parsed object serves the sampler, input validation and the report's axis labels.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from sweeper.errors import ConfigError
from sweeper.results import lookup
from sweeper.sweep.config.expressions import (  # noqa: F401 (evaluate, ExpressionError, check_known: re-exported)
    ExpressionError,
    _check_expression,
    _names,
    check_known,
    evaluate,
)


@dataclasses.dataclass
class SearchSpace:
    """Distributions to sample (in dependency order), fixed values, conditions and constraints."""

    params: dict[str, BaseDistribution]
    fixed: dict[str, Any]
    conditions: dict[str, str]
    constraints: list[str]
    # Knobs whose condition reads no swept knob and is false for this run (e.g. data knobs on synthetic data):
    # fixed to null and out of the sampled space (a grid does not multiply by them), typed by their choices.
    inactive: dict[str, BaseDistribution] = dataclasses.field(default_factory=dict)

    def grid(self) -> dict[str, list[Any]]:
        """The discrete values of every parameter, for Optuna's GridSampler."""
        out: dict[str, list[Any]] = {}
        total = 1
        for name, dist in self.params.items():
            total *= _count(dist) or 1
            if total > MAX_GRID_SIZE:  # before listing: Optuna's GridSampler lists every combination
                raise ConfigError(
                    "hydra.sweeper.params",
                    f"the grid has more than {MAX_GRID_SIZE:,} configurations (at {name})",
                    "narrow the space (fewer values or larger steps), or use another sampler",
                )
            if isinstance(dist, CategoricalDistribution):
                out[name] = list(dist.choices)
            elif dist.step is not None and not getattr(dist, "log", False):
                out[name] = _stepped_values(dist)
            else:
                raise ConfigError(
                    name,
                    f"the grid sampler needs a discrete space, but got {dist}",
                    "declare it with choice(...) or range(...), or pick another sampler",
                )
        return out

    def reads(self, name: str) -> frozenset[str]:
        """The names ``name``'s condition reads (dotted, with their prefixes: ``knobs``, ``knobs.num_workers``)."""
        cond = self.conditions.get(name)
        return _names(cond) if cond is not None else frozenset()

    def fix(self, values: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """What ``values`` (e.g. a recipe to measure first) fixes of the sampled knobs, in dependency order: a knob
        is fixed when the space samples it, its condition holds (given the defaults, the pinned values and what is
        fixed so far) and its value is one the space can give. Second: {key: why} for the keys of ``values`` not
        fixed (the sampler picks those knobs, or nothing samples them)."""
        ns = {**defaults, **self.fixed}
        kept: dict[str, Any] = {}
        dropped = {
            k: "pinned, not sampled" if k in self.fixed else "not in the search space"
            for k in values
            if k not in self.params
        }
        for name, dist in self.params.items():
            if name not in values:
                continue
            cond = self.conditions.get(name)
            if cond is not None and not evaluate(cond, ns):
                dropped[name] = f"inactive ({cond} does not hold)"
            elif not contains(dist, values[name]):
                dropped[name] = f"{values[name]!r} is outside its search space"
            else:
                kept[name] = ns[name] = values[name]
        return kept, dropped

    def size(self) -> int | None:
        """Number of distinct configurations (None when continuous), ignoring conditions."""
        n = 1
        for dist in self.params.values():
            count = _count(dist)
            if count is None:
                return None
            n *= count
        return n


def _count(dist: BaseDistribution) -> int | None:
    """How many values a parameter can take (None: continuous), counted without listing them."""
    if isinstance(dist, CategoricalDistribution):
        return len(dist.choices)
    if getattr(dist, "step", None) is None or getattr(dist, "log", False):
        return None
    return int(round((dist.high - dist.low) / dist.step)) + 1


def contains(dist: BaseDistribution, value: Any) -> bool:
    """Whether the distribution can give ``value``: one of the choices (a bool matches only a bool), or a number
    within the bounds and on the step."""
    if isinstance(dist, CategoricalDistribution):
        return any(isinstance(c, bool) == isinstance(value, bool) and c == value for c in dist.choices)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not dist.low <= value <= dist.high:
        return False
    if isinstance(dist, IntDistribution) and value != int(value):
        return False
    step = getattr(dist, "step", None)
    if step is None or getattr(dist, "log", False):
        return True
    offset = (value - dist.low) / step
    return abs(offset - round(offset)) < 1e-9


def value_types(space: SearchSpace | dict[str, Any]) -> dict[str, type]:
    """Python type of each parameter's values (bool, int, float or str), keyed by dotted config key."""
    dists = {**space.inactive, **space.params} if isinstance(space, SearchSpace) else space
    out: dict[str, type] = {}
    for name, dist in dists.items():
        if isinstance(dist, CategoricalDistribution):
            kinds = {type(c) for c in dist.choices}
            out[name] = kinds.pop() if len(kinds) == 1 else (float if kinds <= {int, float} else str)
        elif isinstance(dist, IntDistribution):
            out[name] = int
        else:
            out[name] = float
    return out


def _stepped_values(dist: IntDistribution | FloatDistribution) -> list[Any]:
    n = int(round((dist.high - dist.low) / dist.step)) + 1
    values = [dist.low + i * dist.step for i in range(n)]
    return [int(v) for v in values] if isinstance(dist, IntDistribution) else [round(v, 12) for v in values]


_INT_LITERAL = re.compile(r"^[+-]?\d+$")


def parse_param(key: str, text: Any) -> BaseDistribution | Any:
    """One grammar string -> an Optuna distribution, or the plain value when it is fixed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep, Transformer
    from hydra.errors import HydraException

    if not isinstance(text, str):
        return text
    try:
        override = OverridesParser.create().parse_override(f"{key}={text}")
    except HydraException as e:
        first = str(e).strip().splitlines()[0]
        raise ConfigError(
            key,
            f"cannot parse {text!r} ({first})",
            "write choice(a, b), range(start, stop, step), interval(a, b) or tag(log, interval(a, b))",
        ) from None
    if not override.is_sweep_override():
        return override.value()
    value = override.value()
    if isinstance(value, ChoiceSweep):
        choices = list(override.sweep_iterator(transformer=Transformer.identity))
        if not choices:
            raise ConfigError(key, "choice() is empty", "list at least one value")
        for c in choices:
            if not isinstance(c, (str, int, float, bool)):
                raise ConfigError(
                    key, f"choice value {c!r} is a {type(c).__name__}", "use plain strings, numbers or booleans"
                )
        return CategoricalDistribution(choices)
    if isinstance(value, RangeSweep):
        _check_range_size(key, text, value)  # before expanding: range(1, 10**11) would fill the memory
        values = list(override.sweep_iterator(transformer=Transformer.identity))
        if not values:
            raise ConfigError(
                key,
                f"{text} is empty (stop is excluded, as in Hydra)",
                "use start < stop for a positive step, or start > stop for a negative one",
            )
        lo, hi = min(values), max(values)
        step = abs(value.step)
        if all(isinstance(v, int) for v in values):
            return IntDistribution(int(lo), int(hi), step=int(step))
        return FloatDistribution(float(lo), float(hi), step=float(step))
    if isinstance(value, IntervalSweep):
        lo, hi = value.start, value.end
        if lo >= hi:
            raise ConfigError(key, f"`low < high` must hold, but got ({lo=}, {hi=})", "swap the bounds")
        log = "log" in value.tags
        if log and lo <= 0:
            raise ConfigError(key, f"a log interval needs low > 0, but got {lo=}", "raise the lower bound")
        bounds = re.findall(r"[-+]?[\d.eE]+", text.split("interval", 1)[1])
        if all(_INT_LITERAL.match(b) for b in bounds[:2]):
            return IntDistribution(int(lo), int(hi), log=log)
        return FloatDistribution(float(lo), float(hi), log=log)
    raise ConfigError(key, f"{text!r} is not a search space", "use choice, range, interval or tag(log, ...)")


# At most this many values in one range(...) and in a grid (the product of every parameter's values): both are
# expanded into lists (by this module, and by Optuna's GridSampler), so their sizes are checked before.
MAX_RANGE_VALUES = 1_000_000
MAX_GRID_SIZE = 1_000_000


def range_size(start: Any, stop: Any, step: Any) -> int:
    """How many values ``range(start, stop, step)`` has in Hydra's meaning (stop excluded, float steps too),
    computed without listing them. ``ValueError`` for a zero or non-finite step or bound."""
    import decimal

    try:
        lo, hi, by = (decimal.Decimal(v) for v in (start, stop, step))
    except (decimal.InvalidOperation, TypeError, ValueError):
        raise ValueError("start, stop and step must be numbers") from None
    if not all(v.is_finite() for v in (lo, hi, by)) or by == 0:
        raise ValueError("start, stop and step must be finite and the step not 0")
    return max(0, int(((hi - lo) / by).to_integral_value(rounding=decimal.ROUND_CEILING)))


def _check_range_size(key: str, text: str, value: Any) -> None:
    try:
        n = range_size(value.start, value.stop, value.step)
    except ValueError as e:
        raise ConfigError(key, f"{text} is not a usable range ({e})", "write range(start, stop, step)") from None
    if n > MAX_RANGE_VALUES:
        raise ConfigError(
            key,
            f"{text} has {n:,} values, more than {MAX_RANGE_VALUES:,}"
            if n < 10**15
            else f"{text} has about {float(n):.1e} values, more than {MAX_RANGE_VALUES:,}",
            "use interval(start, stop) for a wide numeric space, or a larger step",
        )


def build_space(
    params: Mapping[str, Any],
    conditions: Mapping[str, str],
    constraints: list[str],
    defaults: Mapping[str, Any],
) -> SearchSpace:
    """Parse and validate. ``defaults`` maps dotted config keys to their current values (to check names and types)."""
    dists: dict[str, BaseDistribution] = {}
    fixed: dict[str, Any] = {}
    for key, text in params.items():
        check_known(key, defaults)
        parsed = parse_param(key, text)
        if isinstance(parsed, BaseDistribution):
            _check_types(key, parsed, defaults[key])
            dists[key] = parsed
        else:
            if parsed is not None and not isinstance(parsed, (list, dict)):
                _check_types(key, CategoricalDistribution([parsed]), defaults[key])
            fixed[key] = parsed
    conditions = dict(conditions)
    for key in [k for k in conditions if k in fixed]:
        if fixed[key] is None:  # pinned to null: inactive whatever its condition says
            del conditions[key]
        else:  # a pinned knob keeps its condition: a one-value choice, null when the condition fails
            dists[key] = CategoricalDistribution([fixed.pop(key)])
            _check_types(key, dists[key], defaults[key])
    for key, expr in conditions.items():
        if key not in dists:
            raise ConfigError(
                f"hydra.sweeper.conditions.{key}",
                "names a knob that is not in the search space",
                "add it to the space or remove the condition",
            )
        _check_expression(f"hydra.sweeper.conditions.{key}", expr, defaults)
    for i, expr in enumerate(constraints):
        _check_expression(f"hydra.sweeper.constraints[{i}]", expr, defaults)
    order = _dependency_order(dists, conditions)
    inactive: dict[str, BaseDistribution] = {}
    for key in order:
        if key in conditions and not _names(conditions[key]) & (dists.keys() - inactive.keys()):
            try:
                holds = evaluate(conditions[key], {**defaults, **fixed})
            except ExpressionError:  # e.g. arithmetic with a knob that is itself inactive (null): decided per trial
                continue
            if not holds:
                inactive[key] = dists[key]
                fixed[key] = None
                del conditions[key]
    return SearchSpace(
        {k: dists[k] for k in order if k not in inactive}, fixed, dict(conditions), list(constraints), inactive
    )


def _check_types(key: str, dist: BaseDistribution, default: Any) -> None:
    if default is None:
        return
    values = dist.choices if isinstance(dist, CategoricalDistribution) else [dist.low, dist.high]
    for v in values:
        if isinstance(default, bool) != isinstance(v, bool):
            ok = False
        elif isinstance(default, (int, float)) and not isinstance(default, bool):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            if isinstance(default, int) and isinstance(v, float) and not v.is_integer():
                ok = False
        else:
            ok = isinstance(v, type(default))
        if not ok:
            raise ConfigError(
                key,
                f"the space's value {v!r} is {type(v).__name__} but the knob's value {default!r} is "
                f"{type(default).__name__}",
                "give the knob and its space values of one type (quote a string that reads as a number: '3.0')",
            )


def _dependency_order(dists: Mapping[str, BaseDistribution], conditions: Mapping[str, str]) -> list[str]:
    """Unconditional parameters first, then each conditional one after the parameters its condition reads."""
    deps = {k: {n for n in _names(conditions[k]) if n in dists} if k in conditions else set() for k in dists}
    order: list[str] = []
    while len(order) < len(dists):
        ready = [k for k in dists if k not in order and deps[k] <= set(order)]
        if not ready:
            cycle = sorted(k for k in dists if k not in order)
            raise ConfigError("conditions", f"the conditions of {cycle} depend on each other", "break the cycle")
        order.extend(ready)
    return order


def sweep_facts(distributions: dict[str, Any], defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """What the report needs of the sweep, recorded in every row (the report reads only Parquet): ``space``, the
    search space as ``{column: Optuna distribution as JSON data}`` (importance uses each knob's real
    distribution), and ``knob_defaults``, the workload's defaults as ``{column: value}`` (the baseline, labels).
    Plain data, so it travels inside the trial's JSON context; ``facts_columns`` makes the row's two columns."""
    import json

    from optuna.distributions import distribution_to_json

    space = {
        col: json.loads(distribution_to_json(d))
        for k, d in distributions.items()
        if (col := lookup.column_of(k)) is not None
    }
    base = {
        col: v
        for k, v in defaults.items()
        if (col := lookup.column_of(k)) is not None and (v is None or isinstance(v, (bool, int, float, str)))
    }
    return {"space": space, "knob_defaults": base}
