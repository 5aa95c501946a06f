"""``admire viz runs/<name>`` — the trajectory viewer and milestone inspector, served or exported to one file.

Before showing a run, the command gives every step its ``RewardBreakdown`` when the run's files lack
one: the trainer scores an epoch in memory and writes the trajectories, not the rewards, so the viewer
re-scores them here exactly as the trainer did (the same ``score_batch``, the run's reward config, the
milestone list that was in force at that epoch, the run's δ) and keeps the result beside the
trajectories (``trajectories/rewards/``). The viewer library itself (``admire.viz``) stays free of the
encoder, torch and the browser; only this command loads the matcher, and only when something is unscored.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from admire.rewards import RewardConfig
    from admire.types import Trajectory
    from admire.viz.data import RunData

HELP = "view a run: trajectories with their screenshots, actions, milestones and rewards (web or one HTML file)"
RESCORED = "admire viz (re-scored as the trainer scores)"


class RunConfigError(ValueError):
    """The run's config.yaml has a reward value the scorer refuses: re-scoring with it would be wrong."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="a run directory, e.g. runs/<name>")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8765, help="port to serve on (default 8765)")
    parser.add_argument("--export", metavar="FILE", default=None,
                        help="write one self-contained HTML file (works offline) instead of serving; a new "
                             "file, or a previous export to replace")
    parser.add_argument("--max-trajectories", type=int, default=None,
                        help="trajectories in the export (default 200: the last training epoch, then evaluations)")
    parser.add_argument("--no-score", action="store_true",
                        help="do not compute missing reward breakdowns (no sentence encoder is loaded)")
    parser.add_argument("--open", action="store_true", help="open the viewer in the default web browser")


def run(args: argparse.Namespace) -> int:
    from admire.viz.data import RunData
    from admire.viz.export import DEFAULT_MAX_TRAJECTORIES, ExportTargetError, check_export_target, write_export

    try:
        data = RunData(args.run)
    except FileNotFoundError as exc:
        print(f"admire viz: error: {exc}", file=sys.stderr)
        return 2
    if args.max_trajectories is not None and args.max_trajectories < 0:
        print("admire viz: error: --max-trajectories must be >= 0", file=sys.stderr)
        return 2
    if not 0 < args.port < 65536:
        print(f"admire viz: error: --port must be between 1 and 65535, got {args.port}", file=sys.stderr)
        return 2
    if args.export:
        try:  # before scoring, which writes reward files into the run: a refused export changes nothing
            check_export_target(Path(args.export))
        except ExportTargetError as exc:
            print(f"admire viz: error: {exc}", file=sys.stderr)
            return 2
    if not args.export:  # serving needs the `viz` extra; say so before scoring writes anything
        from admire.extras import require

        require("fastapi", "uvicorn", extra="viz", feature="the viewer's server")
    if not args.no_score:
        try:
            scored = score_run(data)
        except RunConfigError as exc:
            print(f"admire viz: error: {exc}", file=sys.stderr)
            return 2
        for kind, epoch, count in scored:
            print(f"scored {kind} epoch {epoch}: {count} trajectories", file=sys.stderr)
    if args.export:
        try:
            path = write_export(data, args.export, args.max_trajectories if args.max_trajectories is not None
                                else DEFAULT_MAX_TRAJECTORIES)
        except ExportTargetError as exc:
            print(f"admire viz: error: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
        if args.open:
            import webbrowser

            webbrowser.open(Path(path).resolve().as_uri())
        return 0
    return _serve(data, args.host, args.port, args.open)


def _serve(data: RunData, host: str, port: int, open_browser: bool) -> int:
    import contextlib
    import threading
    import webbrowser

    from admire.viz.server import serve

    url = f"http://{host}:{port}/"
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"admire viz: warning: serving on {host} makes the run readable by anyone who can reach this "
              "machine; the viewer has no login", file=sys.stderr)
    print(f"admire viz: {data.run.path} at {url} (Ctrl-C to stop)")
    if open_browser:
        threading.Timer(1.0, webbrowser.open, args=(url,)).start()
    with contextlib.suppress(KeyboardInterrupt):
        serve(data, host=host, port=port)
    return 0


def score_run(data: RunData) -> list[tuple[str, int, int]]:
    """Write reward breakdowns for every trajectory file that has none; returns (kind, epoch, count).

    Each training epoch is scored with the lists in force when the trainer scored it and with λ of that
    epoch; an evaluation file (never scored by the trainer) with the bank as it stood after the epoch
    before it, so the viewer can show what would have matched. Runs with ``reward.mode=judge`` are not
    re-scored: the judge's step scores were not kept and asking the judge again would give other numbers.
    Unreadable trajectory lines (or whole files) are skipped with one warning each; a config value the
    scorer refuses is ``RunConfigError``, raised before anything is written.
    """
    from admire.rewards import score_batch
    from admire.viz.data import lists_in_force

    pending = data.unscored_files()
    if not pending:
        return []
    cfg = reward_config(data)
    if cfg.mode == "judge":
        print("admire viz: reward.mode=judge runs are shown without reward breakdowns (judge scores are not "
              "kept in the run)", file=sys.stderr)
        return []
    matcher = None
    if cfg.matches_milestones:
        from admire.rl.scoring import build_matcher

        try:  # the run's own encoder (milestone_reward.encoder), as the trainer scored with it
            matcher = build_matcher(cfg)
        except ValueError as error:  # a local model directory that has moved since the run
            print(f"admire viz: reward breakdowns not computed: {error}", file=sys.stderr)
            return []
    history = data.milestone_history()
    data.rows()  # the index reads every file once and warns about any it must leave out (said once, there)
    done = []
    for kind, epoch in pending:
        trajectories = readable_trajectories(data, kind, epoch)
        if trajectories is None:
            continue
        usable = [t for t in trajectories if not t.excluded]
        scoring_epoch = epoch if kind == "train" else epoch - 1
        lists = lists_in_force(history, scoring_epoch, data.name, data.update_before_reward)
        rewards = score_batch(usable, {key: version.milestones for key, version in lists.items()}, matcher, cfg,
                              max(scoring_epoch, 0))
        try:
            data.run.write_rewards(kind, epoch, {t.id: r for t, r in zip(usable, rewards, strict=True)}, RESCORED)
        except (OSError, ValueError) as error:  # a folder leading outside the run, a read-only run: none written
            print(f"admire viz: reward breakdowns not written: {_reason(error)}", file=sys.stderr)
            return done
        done.append((kind, epoch, len(usable)))
    return done


def reward_config(data: RunData) -> RewardConfig:
    """The run's reward config, or ``RunConfigError`` naming the file and the key: the trainer would have
    refused the same value, so breakdowns computed around it would show rewards the run never had."""
    from admire.rewards import RewardConfig

    try:
        return RewardConfig.from_mapping(data.config)
    except (ValueError, TypeError) as exc:
        raise RunConfigError(f"{data.run.config}: {_keyed(str(exc))}; correct it there, or view the run "
                             "without re-scoring (--no-score)") from None


def _keyed(message: str) -> str:
    """``milestone_reward.threshold must be …`` as ``milestone_reward.threshold: must be …`` (the key first,
    as a config error names it); any other message as it is."""
    match = re.match(r"([A-Za-z_]\w*(?:\.\w+)+) (.*)", message, re.DOTALL)
    return f"{match[1]}: {match[2]}" if match else message


def readable_trajectories(data: RunData, kind: str, epoch: int) -> list[Trajectory] | None:
    """The trajectories of one file that can be scored, or None for a file that cannot be read at all.

    The viewer's pages leave out torn, binary and foreign lines (``viz.index``); scoring skips the same
    lines instead of failing the whole command, and says so in one line, since those trajectories will
    show no breakdowns.
    """
    path = data.run.trajectory_file(kind, epoch)
    try:
        trajectories, skipped = data.readable_trajectories(kind, epoch)
    except (OSError, ValueError) as error:
        if not data.index.left_out(path):  # else the index has just said it is left out of the viewer
            print(f"admire viz: warning: {path} not scored: {_reason(error)}", file=sys.stderr)
        return None
    if skipped:
        print(f"admire viz: warning: {path}: {skipped} unreadable line{'s' if skipped != 1 else ''} (torn, "
              "binary or not a trajectory) left unscored", file=sys.stderr)
    return trajectories


def _reason(error: Exception) -> str:
    """An OSError's own words (``Is a directory``) without its errno and path, which the line names already."""
    return str(error.strerror) if isinstance(error, OSError) and error.strerror else str(error)
