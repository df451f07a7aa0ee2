// receiptflow dashboard: the reader's time zone (docs/spec.md §5.2).
// Windows are UTC hours; this module labels them in the zone chosen in the
// #tz selector, kept in the page URL as ?tz=NAME. The zone's offsets and
// abbreviations come from GET /api/zone (Go's tz data, the same as
// receiptctl's), and a label is built by the rule of Go's
// history.HourLabel: "2026-03-29 03:00 CEST", and a repeated fall-back
// hour with its offset, "2026-10-25 02:00 CET (+01:00)". app.js calls
// window.receiptflowZone; nothing else here touches the page.
'use strict';

window.receiptflowZone = (function () {
  const HOUR = 3600 * 1000;
  const SPAN = 400 * 24 * HOUR; // fetched either side of an hour asked for
  const common = ['UTC', 'Europe/London', 'Europe/Berlin', 'America/New_York', 'America/Chicago',
    'America/Los_Angeles', 'Asia/Tokyo', 'Australia/Sydney'];
  const utcPeriod = { start: -Infinity, end: Infinity, offset: 0, abbrev: 'UTC' };

  let name = new URLSearchParams(location.search).get('tz') || 'UTC';
  let periods = []; // {start, end (ms), offset (s), abbrev}, any order
  let refused = '';
  let pending = null;
  const listeners = [];

  function changed() { for (const fn of listeners) fn(); }

  function find(ms) {
    if (name === 'UTC') return utcPeriod;
    for (const p of periods) if (p.start <= ms && ms < p.end) return p;
    return null;
  }

  // load asks /api/zone for the periods around ms (once at a time).
  function load(ms) {
    if (pending || refused || name === 'UTC') return;
    const asked = name;
    const q = '/api/zone?tz=' + encodeURIComponent(asked) + '&from=' + new Date(ms - SPAN).toISOString().replace(/\.\d+Z$/, 'Z') +
      '&to=' + new Date(ms + SPAN).toISOString().replace(/\.\d+Z$/, 'Z');
    pending = window.receiptflowAuth.fetch(q, { cache: 'no-store' })
      .then((r) => r.json().then((b) => ({ ok: r.ok, b: b })))
      .then(({ ok, b }) => {
        if (asked !== name) return;
        if (!ok) {
          refused = b.error || 'refused';
        } else {
          for (const p of b.periods || []) {
            periods.push({ start: Date.parse(p.start), end: Date.parse(p.end), offset: p.offset_seconds, abbrev: p.abbrev });
          }
        }
        showRefusal();
        changed();
      })
      .catch(() => {})
      .finally(() => { pending = null; });
  }

  // wall is the local "YYYY-MM-DD HH" of ms, or null while unknown.
  function wall(ms) {
    const p = find(ms);
    return p ? new Date(ms + p.offset * 1000).toISOString().slice(0, 13).replace('T', ' ') : null;
  }

  function offsetText(s) {
    const a = Math.abs(s);
    return (s < 0 ? '-' : '+') + String(Math.floor(a / 3600)).padStart(2, '0') + ':' + String(Math.floor(a % 3600 / 60)).padStart(2, '0');
  }

  // label is the local start of the hour starting at iso, as Go's
  // history.HourLabel writes it; the UTC label while the zone loads.
  function label(iso) {
    const ms = Date.parse(iso);
    let p = find(ms);
    if (!p) {
      load(ms);
      p = utcPeriod;
    }
    const w = p === utcPeriod ? new Date(ms).toISOString().slice(0, 13).replace('T', ' ') : wall(ms);
    let repeated = false;
    if (p !== utcPeriod) {
      for (let d = 1; d <= 3 && !repeated; d++) {
        repeated = wall(ms - d * HOUR) === w || wall(ms + d * HOUR) === w;
      }
    }
    return w + ':00 ' + p.abbrev + (repeated ? ' (' + offsetText(p.offset) + ')' : '');
  }

  // The selector: the common zones, the browser's own and the URL's.
  const select = document.getElementById('tz');
  const own = (Intl.DateTimeFormat().resolvedOptions().timeZone) || 'UTC';
  for (const z of [...new Set(common.concat([own, name]))]) {
    const o = document.createElement('option');
    o.value = z;
    o.textContent = z === own && z !== 'UTC' ? z + ' (this browser)' : z;
    select.append(o);
  }
  select.value = name;

  function showRefusal() {
    const msg = document.getElementById('tz-refused');
    msg.hidden = !refused;
    msg.textContent = refused ? name + ' refused, showing UTC: ' + refused : '';
  }

  select.addEventListener('change', () => {
    name = select.value;
    periods = [];
    refused = '';
    pending = null;
    const u = new URL(location.href);
    if (name === 'UTC') u.searchParams.delete('tz');
    else u.searchParams.set('tz', name);
    history.replaceState(null, '', u);
    document.body.dataset.zone = name;
    showRefusal();
    changed();
  });
  document.body.dataset.zone = name;

  return {
    // name is the zone chosen, or UTC while a chosen one is refused.
    name: () => (refused ? 'UTC' : name),
    // ready: the zone chosen is known to be usable, or refused (then
    // name() is UTC); onChange listeners hear when it becomes so.
    ready: () => name === 'UTC' || refused !== '' || periods.length > 0,
    label: label,
    // hour and date are the local hour ("03") and date of iso's hour.
    hour: (iso) => label(iso).slice(11, 13),
    date: (iso) => label(iso).slice(0, 10),
    onChange: (fn) => listeners.push(fn),
  };
})();
