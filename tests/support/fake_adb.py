"""A fake ``adb`` executable for the Android device tests: it answers the calls ``admire.envs.android_devices``
makes (``getprop sys.boot_completed``, ``settings get secure enabled_accessibility_services``, ``emu kill``)
from a state file per emulator serial, records every call, and can be told to hang (with a child process
that holds its pipes, as a stuck ``adb shell`` does) or to fail.

``FakeAdb(folder)`` writes the script and its state into ``folder``; ``fake.path`` is what ``--adb-path``
takes. After ``emu kill`` an emulator reports "not booted" for ``boots_after_kill`` probes, then booted again
with the forwarder enabled, like a restarted emulator that AndroidWorld reconnected to.
"""

from __future__ import annotations

import fcntl
import json
import sys
from pathlib import Path
from typing import Any

from admire.envs.android_devices import ACCESSIBILITY_FORWARDER

SCRIPT = r'''#!{python}
import fcntl, json, subprocess, sys, time
from pathlib import Path

HERE = Path({folder!r})
args = sys.argv[1:]
serial = args[1] if len(args) >= 2 and args[0] == "-s" else ""
rest = args[2:] if serial else args
with open(HERE / "state.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    with open(HERE / "calls.jsonl", "a") as log:  # under the lock: the log's order is the order of the answers
        log.write(json.dumps(args) + "\n")
    state = json.loads((HERE / "state.json").read_text())
    device = {{**state["default"], **state["devices"].get(serial, {{}})}}
    out, code = "", 0
    if device["hang"]:
        pass
    elif device["fail"]:
        out, code = "error: device '" + serial + "' not found", 1
    elif rest == ["shell", "getprop", "sys.boot_completed"]:
        if device["down_probes"] > 0:
            device["down_probes"] -= 1
            out = ""
            if device["down_probes"] == 0:
                device["boot"], device["a11y"] = "1", {a11y!r}
        else:
            out = device["boot"]
    elif rest == ["shell", "settings", "get", "secure", "enabled_accessibility_services"]:
        out = device["a11y"]
    elif rest == ["emu", "kill"]:
        device["boot"], device["a11y"] = "", "null"
        device["down_probes"] = device["boots_after_kill"]
        out = "OK: killing emulator, bye bye"
    else:
        out, code = "fake adb: unknown command " + " ".join(rest), 1
    state["devices"][serial] = device
    (HERE / "state.json").write_text(json.dumps(state))
if device["hang"]:
    sleeper = subprocess.Popen(["sh", "-c", "sleep 30; touch " + str(HERE / "sleeper.finished")])
    (HERE / "sleeper.pid").write_text(str(sleeper.pid))
    sleeper.wait()
print(out)
sys.exit(code)
'''

DEFAULT_DEVICE: dict[str, Any] = {"boot": "1", "a11y": ACCESSIBILITY_FORWARDER, "hang": False, "fail": False,
                                  "down_probes": 0, "boots_after_kill": 2}


class FakeAdb:
    """The fake ``adb`` in ``folder``: every emulator booted with the forwarder on unless told otherwise."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / "adb"
        self.path.write_text(SCRIPT.format(python=sys.executable, folder=str(self.folder),
                                           a11y=ACCESSIBILITY_FORWARDER))
        self.path.chmod(0o755)
        self._write({"default": dict(DEFAULT_DEVICE), "devices": {}})

    def set(self, serial: str | None = None, **fields: Any) -> None:
        """Change one emulator's answers (``serial``), or every emulator's (None): ``boot``, ``a11y``,
        ``hang``, ``fail``, ``boots_after_kill``."""
        unknown = set(fields) - set(DEFAULT_DEVICE)
        assert not unknown, f"unknown fake adb fields {unknown}"
        with open(self.folder / "state.lock", "w") as lock:  # the script may be answering right now
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads((self.folder / "state.json").read_text())
            if serial is None:
                state["default"].update(fields)
                for device in state["devices"].values():
                    device.update(fields)
            else:
                state["devices"].setdefault(serial, dict(state["default"])).update(fields)
            self._write(state)

    def state(self, serial: str) -> dict[str, Any]:
        """What the emulator ``serial`` answers now."""
        state = json.loads((self.folder / "state.json").read_text())
        return {**state["default"], **state["devices"].get(serial, {})}

    def calls(self) -> list[list[str]]:
        """Every call so far, as its argument list (without the program name)."""
        log = self.folder / "calls.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def sleeper_pid(self) -> int | None:
        """The pid of the child a hanging call left behind (None if none hung)."""
        path = self.folder / "sleeper.pid"
        return int(path.read_text()) if path.exists() else None

    def sleeper_finished(self) -> bool:
        """The child of a hanging call ran to its end (nobody killed it)."""
        return (self.folder / "sleeper.finished").exists()

    def _write(self, state: dict[str, Any]) -> None:
        (self.folder / "state.json").write_text(json.dumps(state))
