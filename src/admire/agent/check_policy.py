"""A conformance suite for policies, as ``check_env`` is for env backends: does this policy keep the contract
the trainer, PPO and checkpoints rely on (``admire.agent.base.TrainablePolicy``)?

Run it on a registered policy or on any factory, with the options the factory takes::

    python -m admire.agent.check_policy dom
    python -m admire.agent.check_policy lm --option path=models/tiny-qwen2 --option max_new_tokens=8
    python -m admire.agent.check_policy my_pkg.policy:build_policy --option hidden=64

It exits 0 with one line per check when every check passes, 1 when one fails, and 2 on a usage error. In code,
``check_policy(policy)`` returns the ``CheckResult`` of each check. The screens are built here (a login form),
so no browser starts.

What is checked, and why each matters:

* **protocol**: every method of ``TrainablePolicy`` exists; the trainer calls them all, and a missing one would
  otherwise surface only in the first update or checkpoint.
* **act**: one ``PolicyOutput`` per screen, with a text, an action or None (a format error) and a finite
  log-prob, sampled and greedy.
* **log_prob**: the log-prob of each decision it wrote equals the one ``act`` reported (PPO's ratio is 1 before
  an update), as a differentiable ``[N]`` tensor.
* **gradient**: a backward pass through ``log_prob`` reaches a parameter the optimizer gets.
* **state round trip**: ``load_state_dict(state_dict())`` gives the same log-probs (a resume is exact).
* **tokens** (a ``TokenPolicy`` only): per-token log-probs sum to ``log_prob``, every answer counting a token.

The optional capabilities (``entropy``, ``tokens``, ``reference``, ``adapter``) are reported by name.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from admire.agent.base import (
    CAPABILITIES,
    Decision,
    PolicyOutput,
    TrainablePolicy,
    is_trainable,
    missing_methods,
    scores_tokens,
    trainable_parameters,
)
from admire.errors import brief
from admire.types import Observation, UIElement

TOLERANCE = 1e-3
"""How far a re-scored log-prob may lie from the one ``act`` reported (float32 sums over an answer's tokens)."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str = ""


def screens() -> list[Observation]:
    """Two distinct login forms: enough for a batch, nothing a backend must provide."""
    def form(user: str) -> Observation:
        return Observation(goal=f'Log in as "{user}" with the password "pw".', ui_elements=(
            UIElement(class_name="input", hint_text="Username", is_editable=True, is_clickable=True),
            UIElement(class_name="input", hint_text="Password", is_editable=True, is_clickable=True),
            UIElement(class_name="button", text="Login", is_clickable=True)))
    return [form("ann"), form("bob")]


def check_policy(policy: object) -> list[CheckResult]:
    """Every check on ``policy``; a check whose prerequisite failed is reported as skipped (not ok)."""
    missing = missing_methods(policy, TrainablePolicy)
    results = [CheckResult("protocol", not missing, f"missing {', '.join(missing)}" if missing else
                           "every method of TrainablePolicy")]
    if missing:
        return results
    assert is_trainable(policy)
    observations = screens()
    outputs: list[PolicyOutput] = []
    checks: tuple[tuple[str, Callable[[], str]], ...] = (
        ("act", lambda: _act(policy, observations, outputs)),
        ("log_prob", lambda: _log_prob(policy, observations, outputs)),
        ("gradient", lambda: _gradient(policy, observations, outputs)),
        ("state round trip", lambda: _round_trip(policy, observations, outputs)),
        ("tokens", lambda: _tokens(policy, observations, outputs)))
    for name, check in checks:
        if name != "act" and not outputs:
            results.append(CheckResult(name, False, "skipped: act failed"))
            continue
        try:
            detail = check()
        except Exception as exc:  # noqa: BLE001 - a check reports what broke, it does not stop the others
            results.append(CheckResult(name, False, f"{type(exc).__name__}: {brief(exc)}"))
        else:
            results.append(CheckResult(name, True, detail))
    return results


def capabilities(policy: object) -> list[str]:
    """The optional protocols ``policy`` implements, by name."""
    return [name for name, protocol in CAPABILITIES.items() if not missing_methods(policy, protocol)]


def _decisions(observations: Sequence[Observation], outputs: Sequence[PolicyOutput]) -> list[Decision]:
    return [Decision(o, (), out.text) for o, out in zip(observations, outputs, strict=True)]


def _act(policy: TrainablePolicy, observations: list[Observation], outputs: list[PolicyOutput]) -> str:
    import torch

    with torch.no_grad():
        sampled = policy.act(observations, [[] for _ in observations])
        greedy = policy.act(observations, [[] for _ in observations], greedy=True)
    for label, batch in (("sampled", sampled), ("greedy", greedy)):
        if len(batch) != len(observations) or not all(isinstance(o, PolicyOutput) for o in batch):
            raise AssertionError(f"{label}: {len(observations)} screens gave {batch!r:.120}, not one PolicyOutput each")
        bad = [o for o in batch if not isinstance(o.text, str) or not math.isfinite(o.log_prob)]
        if bad:
            raise AssertionError(f"{label}: an output without a text or a finite log_prob: {bad[0]!r:.160}")
    outputs.extend(sampled)
    valid = sum(o.action is not None for o in sampled)
    return f"{len(sampled)} outputs, {valid} with a parsed action"


def _log_prob(policy: TrainablePolicy, observations: list[Observation], outputs: list[PolicyOutput]) -> str:
    scored = policy.log_prob(_decisions(observations, outputs))
    if tuple(scored.shape) != (len(outputs),) or not scored.requires_grad:
        raise AssertionError(f"log_prob gave shape {tuple(scored.shape)} (requires_grad={scored.requires_grad}); "
                             f"expected a differentiable [{len(outputs)}] tensor")
    gap = max(abs(float(s) - o.log_prob) for s, o in zip(scored.detach(), outputs, strict=True))
    if gap > TOLERANCE:
        raise AssertionError(f"a decision's log_prob is {gap:.3g} from what act reported (tolerance {TOLERANCE})")
    return f"within {gap:.1e} of act's"


def _gradient(policy: TrainablePolicy, observations: list[Observation], outputs: list[PolicyOutput]) -> str:
    parameters = trainable_parameters(policy)
    for parameter in parameters:
        parameter.grad = None
    policy.log_prob(_decisions(observations, outputs)).sum().backward()
    reached = sum(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in parameters)
    for parameter in parameters:
        parameter.grad = None
    if not reached:
        raise AssertionError(f"no gradient reached any of the {len(parameters)} trainable parameters")
    return f"{reached} of {len(parameters)} trainable parameters get a gradient"


def _round_trip(policy: TrainablePolicy, observations: list[Observation], outputs: list[PolicyOutput]) -> str:
    import torch

    decisions = _decisions(observations, outputs)
    with torch.no_grad():
        before = policy.log_prob(decisions)
        policy.load_state_dict(policy.state_dict())
        after = policy.log_prob(decisions)
    if not torch.equal(before, after):
        raise AssertionError(f"log-probs moved by {float((before - after).abs().max()):.3g} after a state round trip")
    return "identical log-probs"


def _tokens(policy: TrainablePolicy, observations: list[Observation], outputs: list[PolicyOutput]) -> str:
    import torch

    decisions = _decisions(observations, outputs)
    with torch.no_grad():
        total = policy.log_prob(decisions)
    if not scores_tokens(policy):
        return "not a token policy"
    with torch.no_grad():
        tokens, mask = policy.token_log_probs(decisions)
    counts = [int(n) for n in mask.sum(dim=1)]
    if min(counts) < 1:
        raise AssertionError(f"the mask counts {counts} answer tokens: every answer has at least its end token")
    gap = float(((tokens * mask).sum(dim=1) - total).abs().max())
    if gap > TOLERANCE:
        raise AssertionError(f"per-token log-probs sum to {gap:.3g} away from log_prob")
    return f"{sum(counts)} answer tokens, sums within {gap:.1e} of log_prob"


def build_policy(spec: str, options: dict[str, Any]) -> Any:
    """A registered policy by name, or ``package.module:attr`` called with ``options``."""
    module, sep, attr = spec.partition(":")
    if sep and "." in module:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj(**options)
    from admire.agent.base import make_policy

    return make_policy(spec, **options)


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value``, the value read as YAML (``8`` is an int, ``true`` a bool, ``models/x`` a string)."""
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"--option {text!r}: write it as key=value, e.g. --option max_new_tokens=8")
    return key.strip(), yaml.safe_load(value)


def main(argv: Sequence[str] | None = None, *, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m admire.agent.check_policy",
        description="Check that a policy keeps the contract the trainer relies on (exit 0: all checks pass, "
                    "1: a check failed, 2: a usage error).")
    parser.add_argument("policy", help="a registered policy ('dom', 'lm') or a factory as 'package.module:attr'")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the policy's factory (repeatable), e.g. path=models/tiny-qwen2")
    args = parser.parse_args(argv)
    prog = parser.prog
    try:
        options = dict(parse_option(text) for text in args.option)
        policy = build_policy(args.policy, options)
    except (ValueError, TypeError, ImportError, AttributeError, FileNotFoundError) as exc:
        print(f"{prog}: error: cannot build {args.policy!r}: {brief(exc)}", file=sys.stderr)
        return 2
    results = check_policy(policy)
    for result in results:
        out(f"{'ok  ' if result.ok else 'FAIL'} {result.name}: {result.detail}")
    out(f"capabilities: {', '.join(capabilities(policy)) or 'none'}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
