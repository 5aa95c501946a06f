"""The viewer's style sheet and its one small script, inlined into every page and the export."""

from __future__ import annotations

CSS = """
:root { --ok: #2f9e44; --bad: #e03131; --muted: #868e96; --line: #dee2e6; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #212529;
  background: #f8f9fa; }
main { max-width: 1180px; margin: 0 auto; padding: 12px 20px 80px; }
nav.top { position: sticky; top: 0; z-index: 5; display: flex; gap: 18px; align-items: center; padding: 8px 20px;
  background: #212529; color: #f8f9fa; }
nav.top a { color: #a5d8ff; text-decoration: none; }
nav.top .keys { margin-left: auto; color: #adb5bd; font-size: 12px; }
h1 { font-size: 22px; margin: 14px 0 6px; } h2 { font-size: 17px; margin: 22px 0 8px; }
h3 { font-size: 14px; margin: 0; }
table { border-collapse: collapse; background: white; width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f5; font-weight: 600; } td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.goal { max-width: 360px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr max-content 1fr max-content 1fr; gap: 2px 12px;
  margin: 6px 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px; background: #e9ecef;
  color: #495057; }
.badge.ok { background: #d3f9d8; color: #2b8a3e; } .badge.bad { background: #ffe3e3; color: #c92a2a; }
.badge.term-env_error { background: #fff3bf; color: #e67700; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.chart-box { background: white; border: 1px solid var(--line); padding: 6px; }
svg.chart { width: 460px; max-width: 100%; height: auto; }
form.filters { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; margin: 8px 0; }
.note { color: #5c677d; font-size: 13px; } .error { color: var(--bad); }
.traj-nav { display: flex; gap: 16px; } .goal-text { font-size: 16px; margin: 4px 0; }
section.step { background: white; border: 1px solid var(--line); border-radius: 6px; margin: 14px 0; padding: 10px 12px;
  scroll-margin-top: 48px; }
section.step.active, section.step:target { border-color: #1c7ed6; box-shadow: 0 0 0 2px #a5d8ff; }
.step-head { display: flex; gap: 16px; align-items: baseline; margin-bottom: 6px; }
.step-head a { text-decoration: none; } .disabled { color: #ced4da; }
.step-body { display: flex; gap: 18px; align-items: flex-start; flex-wrap: wrap; }
figure.shot { position: relative; margin: 0; width: 100%; flex: 0 0 auto; border: 1px solid #ced4da; background: #fff; }
figure.shot { width: min(100%, 320px); }
figure.shot img { display: block; width: 100%; height: auto; image-rendering: pixelated; }
figure.shot svg.overlay { position: absolute; left: 0; top: 0; width: 100%; height: 100%; overflow: visible;
  pointer-events: none; }
.shot.missing, .missing { padding: 30px 12px; color: var(--muted); width: 240px; border: 1px dashed #ced4da; }
.details { flex: 1 1 380px; min-width: 280px; } .details p { margin: 3px 0; }
pre { background: #f1f3f5; padding: 4px 8px; white-space: pre-wrap; word-break: break-word; margin: 4px 0; }
.milestone.hit { color: #2b8a3e; } .milestone.miss { color: #5c677d; } .milestone.none { color: var(--muted); }
.parse-error { color: var(--bad); } .reward-numbers { font-size: 12px; color: #495057; }
table.hits td.rate { text-align: center; background: rgba(47, 158, 68, calc(var(--rate) * 0.8)); min-width: 38px; }
table.hits td.off { color: #ced4da; background: #f8f9fa; } .scroll { overflow-x: auto; }
table.versions ol, ol.current { margin: 0; padding-left: 20px; }
section.page { scroll-margin-top: 48px; }
body.paged section.page { display: none; } body.paged section.page.shown { display: block; }
"""

SCRIPT = """
(function () {
  var body = document.body;
  var pages = Array.prototype.slice.call(document.querySelectorAll('section.page'));
  var steps = Array.prototype.slice.call(document.querySelectorAll('section.step'));
  if (body.dataset.exported && pages.length) { body.classList.add('paged'); }
  function target() {
    var id = decodeURIComponent(location.hash.slice(1));
    return id ? document.getElementById(id) : null;
  }
  function show() {
    var el = target();
    if (pages.length && body.classList.contains('paged')) {
      var page = el ? el.closest('section.page') : null;
      page = page || pages[0];
      pages.forEach(function (p) { p.classList.toggle('shown', p === page); });
      if (el && el === page) { window.scrollTo(0, 0); }
    }
    if (el && el.classList.contains('step')) {
      steps.forEach(function (s) { s.classList.toggle('active', s === el); });
      el.scrollIntoView({block: 'start'});
    }
  }
  function visibleSteps() { return steps.filter(function (s) { return s.offsetParent !== null; }); }
  window.addEventListener('hashchange', show);
  show();
  document.addEventListener('keydown', function (e) {
    if (e.altKey || e.ctrlKey || e.metaKey) { return; }
    if (e.target.closest && e.target.closest('input,select,textarea')) { return; }
    var move = (e.key === 'ArrowRight' || e.key === 'j') ? 1 : (e.key === 'ArrowLeft' || e.key === 'k') ? -1 : 0;
    if (!move) { return; }
    var shown = visibleSteps();
    if (!shown.length) { return; }
    var i = shown.findIndex(function (s) { return s.classList.contains('active'); });
    i = i < 0 ? 0 : Math.max(0, Math.min(shown.length - 1, i + move));
    location.hash = shown[i].id;
    e.preventDefault();
  });
})();
"""
