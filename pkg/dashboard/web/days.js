// receiptflow dashboard: local days (docs/spec.md §5.2) in the zone chosen
// in the #tz selector (zone.js). The server computes them (GET /api/days,
// Go's pkg/history, the same as `receiptctl windows --by day`): this
// module asks again when the zone or the windows change, and draws them.
// Built with DOM calls only, like app.js.
'use strict';

(function () {
  const zone = window.receiptflowZone;
  const $ = (id) => document.getElementById(id);
  const REFRESH_MS = 30000; // also asked this often: an old window's late_dropped may grow
  let asked = null; // the view signature the days drawn were asked for
  let pending = false;
  let again = false;

  function el(tag, attrs, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, String(v));
    for (const c of children) {
      if (c === null || c === undefined) continue;
      n.append(c instanceof Node ? c : String(c));
    }
    return n;
  }

  // load asks /api/days for the zone chosen; one request at a time, the
  // last change asked again when it ends.
  function load() {
    if (!zone.ready()) return; // zone.js's answer calls load again
    if (pending) {
      again = true;
      return;
    }
    pending = true;
    const name = zone.name();
    window.receiptflowAuth.fetch('/api/days?tz=' + encodeURIComponent(name), { cache: 'no-store' })
      .then((r) => r.json().then((b) => ({ ok: r.ok, b: b })))
      .then(({ ok, b }) => { if (name === zone.name()) draw(ok, b); })
      .catch(() => {})
      .finally(() => {
        pending = false;
        if (again) {
          again = false;
          load();
        }
      });
  }

  function draw(ok, b) {
    const body = $('days-body');
    const card = $('days');
    card.dataset.zone = b.zone;
    $('days-zone').textContent = 'days of ' + b.zone;
    if (!ok) {
      card.dataset.refused = 'true';
      body.replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: 6 }, b.zone + ' refused: ' + (b.error || 'unknown error'))));
      $('days-note').textContent = '';
      return;
    }
    card.dataset.refused = 'false';
    const days = b.days || [];
    if (days.length === 0) {
      body.replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: 6 }, 'no windows yet')));
    } else {
      body.replaceChildren(...days.map((d) => dayRow(d, b.stale)));
    }
    $('days-note').textContent = 'A local day is the sum of the hourly windows that start in it: 23, 24 or 25 of them ' +
      'across a DST change; it is final only when every one of its hours is. Hours past the window retention come ' +
      'from the day rollups.' + (b.older ? ' Older days: receiptctl windows --time-zone ' + b.zone + ' --by day.' : '');
  }

  function dayRow(d, staleNow) {
    const final = d.status === 'final';
    const stale = staleNow && !final;
    const status = el('td', { class: 'd-status' }, final
      ? el('span', { class: 'badge final' }, '✓ final')
      : el('span', { class: 'badge provisional' }, 'provisional · ' + d.status.replace('_', ' ')));
    if (stale) status.append(el('span', { class: 'badge stale' }, 'stale'));
    const shift = d.hours < 24 ? 'clocks forward' : d.hours > 24 ? 'clocks back' : null;
    return el('tr', {
      class: (final ? 'final' : 'provisional') + (stale ? ' stale' : ''), 'data-day': d.day, 'data-status': d.status,
      'data-hours': d.hours, 'data-count': d.count, 'data-corrections': d.corrections, 'data-late-dropped': d.late_dropped,
      title: 'from ' + d.label + ' (' + d.start.replace(/:00Z$/, 'Z').replace('T', ' ') + ' UTC), ' + d.windows + ' of ' + d.hours + ' hours with data',
    },
    el('td', { class: 'd-day' }, d.day, ' ', el('span', { class: 'detail' }, 'from ' + d.label.slice(11))),
    el('td', { class: 'd-hours num' }, d.hours, shift ? el('span', { class: 'detail' }, ' ' + shift) : null),
    el('td', { class: 'd-count num' }, d.count),
    status,
    el('td', { class: 'd-corr num' }, d.corrections),
    el('td', { class: 'd-late num' }, d.late_dropped));
  }

  // A live view that changed a window (or the staleness) asks again.
  document.addEventListener('receiptflow:view', (ev) => {
    const v = ev.detail || {};
    const sig = [v.generation, v.total_windows, v.stale].concat((v.windows || []).map((w) => w.window_id + '@' + w.version)).join(',');
    if (sig !== asked) {
      asked = sig;
      load();
    }
  });
  zone.onChange(load);
  setInterval(load, REFRESH_MS);
  load();
})();
