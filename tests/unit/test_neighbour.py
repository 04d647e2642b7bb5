"""probes/neighbour.py: a ballast that burns its share of a core, and leaves nothing behind."""

from __future__ import annotations

import time

import psutil
import pytest

from probes.neighbour import Neighbour


def test_it_burns_about_its_share_and_its_group_is_gone_after() -> None:
    with Neighbour(50.0) as n:
        assert n.proc is not None
        p = psutil.Process(n.proc.pid)
        p.cpu_percent(None)
        time.sleep(1.0)
        share = p.cpu_percent(None)
        pid = n.proc.pid
    # A loose band: the machine is shared; the point is a share, not an idle or a full core.
    assert 20.0 <= share <= 80.0
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_zero_starts_nothing_and_a_bad_share_is_refused() -> None:
    with Neighbour(0.0) as n:
        assert n.proc is None
    with pytest.raises(ValueError, match=r"\[0, 100\]"):
        Neighbour(150.0)
