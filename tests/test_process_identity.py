"""monoagent.ProcessIdentity: a claim's owner named by boot, PID and start time, so a reused PID is not its owner."""

from __future__ import annotations

import os
import subprocess
import sys

import attrs
import pytest

from monoagent import ProcessIdentity

linux_only = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc (start time and boot id)")


def test_this_process_is_alive_and_its_token_reads_back():
    me = ProcessIdentity.current()
    assert me.pid == os.getpid() and me.alive()
    assert ProcessIdentity.parse(me.token()) == me
    assert ProcessIdentity.of(os.getpid()) == me


@pytest.mark.parametrize("token", ["", "0:1:x", "abc", "12:3", "12:3:b:4", "-1:2:3", 12, None, "12:3:" + "a" * 65])
def test_a_token_that_is_not_one_parses_to_none(token):
    assert ProcessIdentity.parse(token) is None


@linux_only
def test_a_live_pid_with_another_start_time_or_boot_is_not_the_owner():
    """PID reuse, for real: the PID runs (it is this very process), but it is not the process that claimed."""
    me = ProcessIdentity.current()
    assert me.precise and me.started is not None
    assert not attrs.evolve(me, started=me.started + 1).alive()  # same PID, started at another time: a reused PID
    assert not attrs.evolve(me, boot="0" * 8 + "-0000-0000-0000-" + "0" * 12).alive()  # another boot


@linux_only
def test_a_killed_process_whose_pid_is_handed_to_a_live_one_is_gone():
    """Record a child's identity, kill it, then forge its PID as another live process's: the claim is released."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        recorded = ProcessIdentity.of(child.pid)
        assert recorded is not None and recorded.precise and recorded.alive()  # a live genuine owner still holds
    finally:
        child.kill()
        child.wait()
    assert not recorded.alive()
    survivors: list[subprocess.Popen[bytes]] = []
    try:
        while True:  # a process started in a later clock tick than the dead one (start times count 1/100 s ticks)
            survivors.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]))
            live = ProcessIdentity.of(survivors[-1].pid)
            assert live is not None
            if live.started != recorded.started:
                break
        reused = attrs.evolve(recorded, pid=live.pid)  # the kernel gave the dead owner's PID to a new process
        assert not reused.alive()
        assert live.alive()
    finally:
        for survivor in survivors:
            survivor.kill()
            survivor.wait()


def test_an_identity_with_a_pid_only_is_judged_by_the_pid_and_never_by_this_process():
    """A record of an older release (a PID only): a running PID holds, a dead one or this process's own does not."""
    assert ProcessIdentity(os.getppid()).alive()
    assert not ProcessIdentity(os.getpid()).alive() or not ProcessIdentity.current().precise
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not ProcessIdentity(child.pid).alive()
