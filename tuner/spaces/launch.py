"""The one launch-command builder: a search space's settings for a configuration.

Tuning and ``autotune probe`` both start servers from it, so a configuration starts the same
way from either. Order: what every launch sets (``common``), what the baseline needs to start
on this machine (``baseline``), then the configuration's knobs, which override the baseline's
flags and variables where both set one (a flag is never passed twice).
"""

from __future__ import annotations

from typing import Any

from tuner.spaces.space import SearchSpace


def launch_settings(
    space: SearchSpace, params: dict[str, Any], ctx: dict[str, Any]
) -> tuple[list[str], dict[str, str]]:
    """The engine arguments and environment of one configuration (``{}``: the baseline)."""
    base_args, base_env = list(space.baseline.args), dict(space.baseline.env)
    if params:
        emit = space.render(params, ctx)
        args = [*without_flags(base_args, emit.args), *emit.args]
        env = {**base_env, **emit.env}
    else:
        args, env = base_args, base_env
    return [*space.common.args, *args], {**space.common.env, **env}


def without_flags(base: list[str], override: list[str]) -> list[str]:
    """``base`` launch arguments without the flags (and their values) that ``override`` sets."""
    taken = {a for a in override if a.startswith("--")}
    out: list[str] = []
    i = 0
    while i < len(base):
        a = base[i]
        has_value = i + 1 < len(base) and not base[i + 1].startswith("--")
        if a.startswith("--") and a in taken:
            i += 2 if has_value else 1
            continue
        out.append(a)
        i += 1
    return out
