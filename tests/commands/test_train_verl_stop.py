"""``admire train trainer.backend=verl`` runs verl in its own process group; stopping the command stops the
whole group (verl's trainer and the Ray cluster it started), not only its first process."""

from __future__ import annotations

import os
import subprocess
import time

from admire.commands.train import stop_process_group


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_stopping_verl_ends_its_whole_process_group() -> None:
    process = subprocess.Popen(["bash", "-c", "sleep 120 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                               start_new_session=True)
    child = int(process.stdout.readline())  # a grandchild, as Ray's workers are to `admire train`
    assert alive(child)
    started = time.monotonic()
    stop_process_group(process, grace_s=5.0)
    assert process.returncode is not None and not alive(child)
    assert time.monotonic() - started < 5.0  # SIGTERM sufficed
    assert os.getpgid(os.getpid()) != process.pid  # the caller's own group was never signalled


def test_a_member_that_ignores_sigterm_is_killed_after_the_grace_even_when_the_leader_is_gone() -> None:
    # Ray's workers may outlive the process that started them: the group is stopped when all of it is gone.
    process = subprocess.Popen(["bash", "-c", "(trap '' TERM; sleep 120) & echo $!; wait"], stdout=subprocess.PIPE,
                               text=True, start_new_session=True)
    child = int(process.stdout.readline())
    time.sleep(0.2)  # the subshell has set its trap
    started = time.monotonic()
    stop_process_group(process, grace_s=1.0)
    assert process.returncode is not None and not alive(child)
    assert 1.0 <= time.monotonic() - started < 10.0  # the grace, then SIGKILL
