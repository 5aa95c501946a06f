"""Settling a MiniWoB++ page on virtual time: the page's clock runs only when the env runs it.

Why: the wall-clock settle (:mod:`admire.envs.miniwob_settle`) makes a seeded run reproducible by
waiting out the page's own timers, and a 300 ms ``setTimeout`` then costs 300 ms of nothing. Here the
page's notion of time is replaced before the episode starts: ``setTimeout``/``setInterval``,
``requestAnimationFrame``, ``performance.now()`` and ``Date`` all read a clock held in the page
(``window.__admireSettle``), which stands still between env calls. After reset and after each action
the env *plays* the clock: it jumps straight to the next pending timer or frame, runs it, lets the
page's promises and rendering happen (one ``MessageChannel`` hop), and goes on until no short work is
pending — the same "settled" as the wall-clock mode (timeouts of at most ``SHORT_TIMER_MS``, frames,
jQuery animations, finite CSS/Web animations, jQuery requests, the document and its images loading) — or
until ``max_ms`` of page time have passed. A 300 ms menu delay then costs one callback.

* Finite CSS transitions and Web animations are paused when first seen and driven by the clock from
  there, one frame at a time (the clock stood still since the call that started them, so they start at
  the page time they were seen at), and an accordion opens in page time too; endless ones (spinners) are left alone and
  are not waited for.
* Long timers (the lifted episode timer) and intervals (the page's countdown) are not waited for:
  they fire only when the clock passes them while playing short work, or in a ``wait`` action, which
  plays the clock for its duration instead of sleeping.
* Frames fall at fixed steps from the start of the episode, so an animation is sampled at the same
  page times whatever ran before it on the same page.
* Real-time work that no clock controls (a request, the document, an ``<img>`` or a CSS image still
  loading) is waited for in real time, up to ``max_ms``.

Cost: what the page's callbacks cost, and nothing else; a page that never settles (chase-circle) is
read after ``max_ms`` of page time, about a hundred frames, not ``max_ms`` of wall time.
"""

from __future__ import annotations

from admire.envs.miniwob_dom import READ_PAGE_JS
from admire.envs.miniwob_settle import IMAGES_LOADING_JS, LEFTOVERS_JS

FRAME_MS = 1000.0 / 60.0
"""Page time between two animation frames (60 Hz)."""

_INSTALL_FN = r"""
function (shortMs) {
  if (window.__admireSettle) { return; }
  var RealDate = window.Date;
  var realNow = performance.now.bind(performance);
  var realSetTimeout = window.setTimeout.bind(window);
  var realClearTimeout = window.clearTimeout.bind(window);
  var t0 = realNow(), epoch0 = RealDate.now();
  var S = {virtual: true, now: t0, phase: t0, shortMs: shortMs, tasks: {}, shortCount: 0, frameCount: 0,
           nextId: 10000000, nextOrder: 0, driven: [],
           initial: Array.prototype.slice.call(document.body.children)};
  var channel = new MessageChannel(), resumeWith = null;
  channel.port1.onmessage = function () { var f = resumeWith; resumeWith = null; if (f) { f(); } };
  S.yieldThen = function (f) { resumeWith = f; channel.port2.postMessage(0); };

  // ---- the clock: performance.now() and Date read page time
  var epochNow = function () { return epoch0 + (S.now - t0); };
  performance.now = function () { return S.now; };
  var VirtualDate = function (a, b, c, d, e, f, g) {
    var n = arguments.length;
    if (!(this instanceof VirtualDate)) { return new RealDate(epochNow()).toString(); }
    if (n === 0) { return new RealDate(epochNow()); }
    if (n === 1) { return new RealDate(a); }
    return new RealDate(a, b, n > 2 ? c : 1, n > 3 ? d : 0, n > 4 ? e : 0, n > 5 ? f : 0, n > 6 ? g : 0);
  };
  VirtualDate.prototype = RealDate.prototype;
  VirtualDate.now = epochNow;
  VirtualDate.UTC = RealDate.UTC;
  VirtualDate.parse = RealDate.parse;
  window.Date = VirtualDate;

  // ---- timers and frames, due in page time
  var add = function (task) {
    task.id = S.nextId++;
    task.order = S.nextOrder++;
    S.tasks[task.id] = task;
    if (task.short) { S.shortCount++; }
    if (task.frame) { S.frameCount++; }
    return task.id;
  };
  var remove = function (id) {
    var task = S.tasks[id];
    if (!task) { return false; }
    delete S.tasks[id];
    if (task.short) { S.shortCount--; }
    if (task.frame) { S.frameCount--; }
    return true;
  };
  var callable = function (fn) {
    if (typeof fn === 'function') { return fn; }
    var code = String(fn);
    return function () { (0, eval)(code); };
  };
  window.setTimeout = function (fn, ms) {
    var delay = Math.max(0, +ms || 0);
    return add({fn: callable(fn), args: Array.prototype.slice.call(arguments, 2), due: S.now + delay,
                short: delay <= S.shortMs, every: 0, frame: false});
  };
  window.setInterval = function (fn, ms) {
    var every = Math.max(1, +ms || 0);
    return add({fn: callable(fn), args: Array.prototype.slice.call(arguments, 2), due: S.now + every,
                short: false, every: every, frame: false});
  };
  window.clearTimeout = window.clearInterval = function (id) {
    if (!remove(id)) { realClearTimeout(id); }
  };
  window.requestAnimationFrame = function (fn) {
    return add({fn: fn, args: null, due: S.nextFrame(), short: false, every: 0, frame: true});
  };
  window.cancelAnimationFrame = function (id) { remove(id); };

  S.nextFrame = function () {
    // The first frame after now; the tolerance keeps a frame's own time from rounding to the frame before it.
    return S.phase + (Math.floor((S.now - S.phase) / %(frame)s + 1e-6) + 1) * %(frame)s;
  };
  S.next = function () {
    var best = null;
    for (var key in S.tasks) {
      var task = S.tasks[key];
      if (!best || task.due < best.due || (task.due === best.due && task.order < best.order)) { best = task; }
    }
    return best;
  };
  S.run = function (task) {
    S.now = Math.max(S.now, task.due);
    if (task.every) { task.due += task.every; task.order = S.nextOrder++; } else { remove(task.id); }
    try {
      if (task.frame) { task.fn(task.due); } else { task.fn.apply(window, task.args); }
    } catch (err) {
      console.error(err);  // as the browser would report an uncaught error in a timer
    }
  };

  // ---- CSS transitions and Web animations with an end: paused when first seen, then driven by the clock
  S.drive = function () {
    if (!document.getAnimations) { return; }
    var anims = document.getAnimations();
    for (var i = 0; i < anims.length; i++) {
      var a = anims[i];
      if (a.__admireStart !== undefined || a.playState !== 'running' || !a.effect) { continue; }
      if (!isFinite(a.effect.getComputedTiming().endTime)) { continue; }
      a.__admireStart = S.now;  // the page's clock stood still since whatever started it: it starts now
      a.pause();
      a.currentTime = 0;
      S.driven.push(a);
    }
    var still = [];
    for (var j = 0; j < S.driven.length; j++) {
      var b = S.driven[j];
      if (b.playState === 'idle' || b.playState === 'finished') { continue; }  // cancelled, or finished by the page
      var end = b.effect ? b.effect.getComputedTiming().endTime : 0;
      var at = S.now - b.__admireStart;
      if (at >= end) { b.finish(); continue; }
      b.currentTime = at;
      still.push(b);
    }
    S.driven = still;
  };

  S.busy = function () {
    // What short work is still to come ('' when none); realTimeOnly says which only real time can end.
    if (S.shortCount > 0) { return 'timers'; }
    if (S.frameCount > 0) { return 'frames'; }
    var jq = window.jQuery;
    if (jq && jq.timers && jq.timers.length > 0) { return 'jquery'; }
    if (S.driven.length > 0) { return 'animations'; }
    if (jq && jq.active > 0) { return 'requests'; }
    if (document.readyState !== 'complete') { return 'loading'; }
    if (S.imagesLoading()) { return 'images'; }
    return '';
  };
  var realTimeOnly = {requests: 1, loading: 1, images: 1};

  // Play the clock from now: until nothing short is pending (untilSettled), or until `ms` of page time
  // have passed; then done(settled, busy, page ms played, real ms spent).
  S.play = function (ms, untilSettled, done) {
    var start = S.now, end = S.now + ms, realStart = realNow();
    var step = function () {
      S.drive();
      var busy = S.busy();
      if (untilSettled && !busy) { done(true, '', S.now - start, realNow() - realStart); return; }
      var task = S.next();
      var at = task ? task.due : Infinity;
      if (S.driven.length > 0) {
        at = Math.min(at, S.nextFrame());
      }
      if (untilSettled && realTimeOnly[busy] && at > S.now) {
        // nothing in page time comes first: the document or an image is loading in real time
        if (realNow() - realStart >= ms) { done(false, busy, S.now - start, realNow() - realStart); return; }
        realSetTimeout(step, %(poll)s);
        return;
      }
      if (at > end) {
        S.now = Math.max(S.now, end);
        S.drive();
        done(!untilSettled || !S.busy(), untilSettled ? busy : '', S.now - start, realNow() - realStart);
        return;
      }
      if (task && task.due === at) { S.run(task); } else { S.now = at; }
      S.yieldThen(step);
    };
    step();
  };
  S.startEpisode = function () { S.phase = S.now; };
  S.leftovers = %(leftovers)s;
  S.cssImages = {};
  S.imagesLoading = %(images)s;
  window.__admireSettle = S;
}
"""

CLOCK_HOOK_JS = "(" + _INSTALL_FN.replace("%(frame)s", repr(FRAME_MS)).replace("%(poll)s", "5").replace(
    "%(leftovers)s", LEFTOVERS_JS).replace("%(images)s", IMAGES_LOADING_JS) + ")(arguments[0]);\n"
"""Install the page clock in the current page (a no-op when it is there). Argument: short-timer ms."""

CLOCK_SETTLE_READ_JS = (
    CLOCK_HOOK_JS
    + r"""
var maxMs = arguments[2], done = arguments[arguments.length - 1];
var readPage = function () {
""" + READ_PAGE_JS + r"""
};
var finish = function (settled, busy, pageMs, realMs) {
  var page;
  try { page = readPage(); } catch (e) { page = {error: String(e)}; }
  page.settle = {settled: settled, waited_ms: pageMs, real_ms: realMs, busy: busy};
  done(page);
};
if (maxMs <= 0) { finish(false, 'off', 0, 0); } else { window.__admireSettle.play(maxMs, true, finish); }
"""
)
"""Arguments: short-timer ms, quiet ms (unused: page time has no idle gaps to wait out), max ms. Plays the
clock until the page settles, then answers :data:`READ_PAGE_JS`'s object plus ``settle: {settled,
waited_ms (page time), real_ms, busy}``, as the wall-clock read does."""

CLOCK_ADVANCE_JS = (
    CLOCK_HOOK_JS
    + r"""
var done = arguments[arguments.length - 1];
window.__admireSettle.play(arguments[1], false, function () { done(true); });
"""
)
"""Arguments: short-timer ms, ms. Plays the clock for ``ms`` of page time, every timer and frame due
in it included: the ``wait`` action on virtual time."""
