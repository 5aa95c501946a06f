"""Waiting for a MiniWoB++ page to settle before it is read, so that the same seed gives the same screen.

Why: an action returns as soon as the browser has dispatched its events, but pages keep working after
that. use-autocomplete's jQuery-UI menu opens 300 ms after the last keystroke (a ``setTimeout``),
d3 transitions run on animation frames, tabs and collapsibles animate. Read at once, the observation
depends on how fast the machine was, and so does what a greedy policy does next: the same seeded
evaluation gave use-autocomplete 0% in one run and 40% in another. The fix is AndroidWorld's
``wait_to_stabilize`` idea, done inside the page instead of by comparing screenshots:

* :data:`SETTLE_HOOK_JS` (run at every reset, idempotent) wraps ``setTimeout``/``clearTimeout`` and
  ``requestAnimationFrame``/``cancelAnimationFrame`` to count **pending short work**: timeouts of at
  most :data:`SHORT_TIMER_MS` and animation-frame callbacks. Long timeouts (the lifted episode timer,
  10^9 ms) and ``setInterval`` (the page's countdown clock, stock tickers) are not waited for, and the
  DOM changes their callbacks make are dropped, so a ticking clock never keeps a page "busy". A
  ``MutationObserver`` on the whole document records the time of the **last DOM change**, ignoring
  the bookkeeping attributes miniwob's own DOM read writes (``data-wob_ref``…) and its HUD
  (``#reward-display``).
* :data:`SETTLE_READ_JS` (after reset and after each action, one ``execute_async_script`` call) waits
  until nothing short is pending (timers, frames, jQuery animations and requests, finite CSS/Web
  animations, the document or an image loading) **and** the DOM has not changed for ``quiet_ms``, or
  until ``max_ms`` have passed; then it reads the page (:data:`~admire.envs.miniwob_dom.READ_PAGE_JS`) in
  the same call.
  A page that did nothing since the last change costs no wait at all: the quiet window is counted
  from the last change, not from the call.

A page that never settles (an endless animation: chase-circle, moving-items) is read after ``max_ms``;
the read then says ``settled: false``. Everything runs in the page, so the wait costs no extra browser
round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admire.envs.miniwob_dom import READ_PAGE_JS

SETTLE_MODES = ("virtual", "wall", "off")
"""How a page is read after reset and each action: ``virtual`` plays the page's own clock until it settles
(:mod:`admire.envs.miniwob_clock`), ``wall`` waits in real time until it settles (this module), ``off``
reads it at once (not reproducible on timing-sensitive tasks)."""

DEFAULT_SETTLE = "virtual"

SHORT_TIMER_MS = 1000
"""Timeouts up to this long are waited for (menus, delayed buttons, debounces); longer ones are clocks
or episode timers that an observation must not wait for."""

DEFAULT_SETTLE_QUIET_S = 0.02
"""No DOM change for this long (after all short work is done) counts as settled. Just over one frame at
60 Hz: timers, frames and animations are tracked, so this only catches what they miss. Measured
(`admire bench settle`, dom policy, 4 timing-sensitive tasks × 10 seeds): 0.01, 0.02 and 0.05 s were
equally reproducible; env speed on click-tab-2 0.78, 0.65 and 0.34 × that of reading at once."""

DEFAULT_SETTLE_MAX_S = 1.5
"""The most one settle wait takes; an endlessly animated page is read after this."""

POLL_MS = 5
"""How often the wait looks again while short work is pending."""

_INSTALL_FN = r"""
function (shortMs) {
  if (window.__admireSettle) { return; }
  var S = {pendingTimers: {}, timerCount: 0, pendingFrames: {}, frameCount: 0,
           last: performance.now(), shortMs: shortMs,
           initial: Array.prototype.slice.call(document.body.children)};
  var origSetTimeout = window.setTimeout, origClearTimeout = window.clearTimeout;
  var origSetInterval = window.setInterval;
  var origRaf = window.requestAnimationFrame, origCancelRaf = window.cancelAnimationFrame;
  S.setTimeout = function (fn, ms) { return origSetTimeout.call(window, fn, ms); };
  var ignoredAttrs = {'data-wob_ref': 1, 'data-wob_eps': 1, 'data-tampered': 1};
  var inHud = function (node) {
    for (var n = node; n; n = n.parentNode) {
      if (n.id === 'reward-display') { return true; }
    }
    return false;
  };
  var note = function (records) {
    for (var i = 0; i < records.length; i++) {
      var r = records[i];
      if (r.type === 'attributes' && ignoredAttrs[r.attributeName]) { continue; }
      if (inHud(r.target)) { continue; }
      S.last = performance.now();
      return;
    }
  };
  S.observer = new MutationObserver(note);
  S.observer.observe(document.documentElement, {subtree: true, childList: true, attributes: true,
                                                characterData: true});
  S.flush = function () { note(S.observer.takeRecords()); };
  var quietly = function (fn, self, args) {
    // Run a clock's callback and drop the DOM changes it made: they are not the page reacting.
    S.flush();
    try { return fn.apply(self, args); } finally { S.observer.takeRecords(); }
  };
  window.setTimeout = function (fn, ms) {
    var args = Array.prototype.slice.call(arguments, 2);
    if (typeof fn !== 'function') { return origSetTimeout.apply(window, arguments); }
    var short = !(+ms > S.shortMs);
    var id = origSetTimeout.call(window, function () {
      if (!short) { return quietly(fn, this, args); }
      if (S.pendingTimers[id]) { delete S.pendingTimers[id]; S.timerCount--; }
      return fn.apply(this, args);
    }, ms);
    if (short) { S.pendingTimers[id] = 1; S.timerCount++; }
    return id;
  };
  window.clearTimeout = function (id) {
    if (S.pendingTimers[id]) { delete S.pendingTimers[id]; S.timerCount--; }
    return origClearTimeout.call(window, id);
  };
  window.setInterval = function (fn, ms) {
    var args = Array.prototype.slice.call(arguments, 2);
    if (typeof fn !== 'function') { return origSetInterval.apply(window, arguments); }
    return origSetInterval.call(window, function () { return quietly(fn, this, args); }, ms);
  };
  if (origRaf) {
    window.requestAnimationFrame = function (fn) {
      var id = origRaf.call(window, function (t) {
        if (S.pendingFrames[id]) { delete S.pendingFrames[id]; S.frameCount--; }
        return fn(t);
      });
      S.pendingFrames[id] = 1; S.frameCount++;
      return id;
    };
    window.cancelAnimationFrame = function (id) {
      if (S.pendingFrames[id]) { delete S.pendingFrames[id]; S.frameCount--; }
      return origCancelRaf.call(window, id);
    };
  }
  S.busy = function () {
    // What short work is still to come; '' when none.
    if (S.timerCount > 0) { return 'timers'; }
    if (S.frameCount > 0) { return 'frames'; }
    if (document.readyState !== 'complete') { return 'loading'; }
    var jq = window.jQuery;
    if (jq && (jq.active > 0 || (jq.timers && jq.timers.length > 0))) { return 'jquery'; }
    if (document.getAnimations) {
      var anims = document.getAnimations();
      for (var i = 0; i < anims.length; i++) {
        var a = anims[i];
        if (a.playState === 'running' && a.effect && isFinite(a.effect.getComputedTiming().endTime)) {
          return 'animations';
        }
      }
    }
    if (S.imagesLoading()) { return 'images'; }  // last: it reads every element's style
    return '';
  };
  S.leftovers = %(leftovers)s;
  S.cssImages = {};
  S.imagesLoading = %(images)s;
  window.__admireSettle = S;
}
"""

IMAGES_LOADING_JS = r"""function () {
    // Whether an image the page shows is still loading: an <img>, or a CSS `content`/`background-image`
    // url (email-inbox's reply and send icons are `content: url(...)`: until the file has loaded the
    // element has no size, and a read then leaves it out). CSS urls are loaded once through an Image
    // kept in S.cssImages, so a url already loaded costs nothing.
    var images = document.images;
    for (var i = 0; i < images.length; i++) {
      if (!images[i].complete) { return true; }
    }
    var all = document.body.getElementsByTagName('*');
    var pattern = /url\(["']?([^"')]+)["']?\)/g;
    for (var j = 0; j < all.length; j++) {
      var style = getComputedStyle(all[j]);
      var sources = style.content + ' ' + style.backgroundImage;
      if (sources.indexOf('url(') < 0) { continue; }
      var match;
      pattern.lastIndex = 0;
      while ((match = pattern.exec(sources)) !== null) {
        var image = S.cssImages[match[1]];
        if (!image) {
          image = S.cssImages[match[1]] = new Image();
          image.src = match[1];
        }
        if (!image.complete) { return true; }
      }
    }
    return false;
  }"""
"""``S.imagesLoading`` of either settle hook (``S.cssImages``: url -> Image, filled as urls are seen)."""

LEFTOVERS_JS = r"""function () {
    // Visible elements an episode appended to <body> (jQuery-UI menus, dialogs): they outlive a
    // reset and would show the last episode's suggestions in the next one.
    var kids = document.body.children;
    for (var i = 0; i < kids.length; i++) {
      if (S.initial.indexOf(kids[i]) >= 0) { continue; }
      var r = kids[i].getBoundingClientRect();
      if (r.width > 0 && r.height > 0) { return true; }
    }
    return false;
  }"""
"""``S.leftovers`` of either settle hook (``S.initial``: the body's children when the hook was installed)."""

SETTLE_HOOK_JS = "(" + _INSTALL_FN.replace("%(leftovers)s", LEFTOVERS_JS).replace(
    "%(images)s", IMAGES_LOADING_JS) + ")(arguments[0]);\n"
"""Install the settle hooks in the current page (a no-op when they are there). Argument: short ms."""

SETTLE_READ_JS = (
    SETTLE_HOOK_JS
    + r"""
var quietMs = arguments[1], maxMs = arguments[2], done = arguments[arguments.length - 1];
var readPage = function () {
""" + READ_PAGE_JS + r"""
};
var S = window.__admireSettle;
var t0 = performance.now();
var finish = function (settled, busy) {
  var page;
  try { page = readPage(); } catch (e) { page = {error: String(e)}; }
  page.settle = {settled: settled, waited_ms: performance.now() - t0, busy: busy};
  done(page);
};
var look = function () {
  S.flush();
  var now = performance.now();
  var busy = S.busy();
  var quietFor = now - S.last;
  if (!busy && quietFor >= quietMs) { finish(true, ''); return; }
  if (now - t0 >= maxMs) { finish(false, busy || 'dom'); return; }
  var next = busy ? %(poll)d : quietMs - quietFor;
  S.setTimeout(look, Math.max(1, Math.min(next, maxMs - (now - t0))));
};
if (maxMs <= 0) { finish(false, 'off'); } else { look(); }
""".replace("%(poll)d", str(POLL_MS))
)
"""Arguments: short-timer ms, quiet ms, max ms. Installs the hooks if missing, waits, answers
:data:`READ_PAGE_JS`'s object plus ``settle: {settled, waited_ms, busy}``. ``max_ms <= 0``: no wait."""


@dataclass(frozen=True)
class SettleReport:
    """How one wait ended: ``settled`` (False: the cap was hit or the wait was off), how long it took,
    and what was still busy at the cap (``timers``, ``frames``, ``jquery``, ``animations``, ``dom``)."""

    settled: bool
    waited_s: float
    busy: str


def settle_report(raw: Mapping[str, Any]) -> SettleReport:
    """The ``settle`` part of :data:`SETTLE_READ_JS`'s answer."""
    settle = raw.get("settle") or {}
    return SettleReport(settled=bool(settle.get("settled")), waited_s=float(settle.get("waited_ms") or 0.0) / 1000,
                        busy=str(settle.get("busy") or ""))


def check_settle_mode(mode: str) -> str:
    if mode not in SETTLE_MODES:
        raise ValueError(f"settle must be one of {', '.join(SETTLE_MODES)}, got {mode!r}")
    return mode


SETTLE_QUIET_S_LIMIT = 5
SETTLE_MAX_S_LIMIT = 10
"""The largest ``settle_quiet_s`` and ``settle_max_s``, here and in the config schema."""


def check_settle_options(quiet_s: float, max_s: float) -> tuple[float, float]:
    """Validated ``(settle_quiet_s, settle_max_s)``; ``max_s == 0`` turns the wait off."""
    quiet, cap = float(quiet_s), float(max_s)
    if not 0 <= quiet <= SETTLE_QUIET_S_LIMIT:
        raise ValueError(f"settle_quiet_s must be between 0 and {SETTLE_QUIET_S_LIMIT} seconds, got {quiet_s}")
    if not 0 <= cap <= SETTLE_MAX_S_LIMIT:
        raise ValueError(f"settle_max_s must be between 0 (no wait) and {SETTLE_MAX_S_LIMIT} seconds, got {max_s}")
    return quiet, cap
