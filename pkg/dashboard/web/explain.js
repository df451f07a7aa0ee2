// receiptflow dashboard: the explanation drawer. Clicking a window's row
// (or Enter on a focused row) opens why the window holds its number, from
// GET /api/explain/{id} (pkg/explain, the code of receiptctl explain).
// Escape or the close button closes it and gives the focus back to the row.
'use strict';

(function () {
  const $ = (id) => document.getElementById(id);
  const drawer = $('explain');
  let opener = null; // the row that opened the drawer
  let asked = ''; // the window last asked for: a late answer for another is dropped
  // Why this dashboard cannot explain (GET /api/explain), '' if it can:
  // then the drawer says so without asking for a window. A row opened
  // before the answer came waits for it.
  const unavailable = window.receiptflowAuth.fetch('/api/explain', { cache: 'no-store' }).then((r) => r.json())
    .then((b) => (b.available ? '' : b.reason)).catch(() => '');

  function el(tag, attrs, ...children) {
    const n = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) n.setAttribute(k, v);
    for (const c of children) n.append(c instanceof Node ? c : String(c));
    return n;
  }

  function list(id, items, empty) {
    const ul = $(id);
    ul.replaceChildren(...(items.length ? items : [el('li', { class: 'muted' }, empty)]));
  }

  function show(e) {
    $('explain-error').hidden = true;
    $('explain-body').hidden = false;
    $('explain-status').textContent = e.status.replace('_', ' ') + ' · version ' + e.version;
    $('explain-count').textContent = e.count;
    $('explain-on-time').textContent = e.on_time;
    $('explain-corrections-n').textContent = e.corrections.length;
    list('explain-corrections', e.corrections.map((c) => el('li', { 'data-event-id': c.event_id },
      el('code', {}, c.event_id), ' → partition ' + c.partition + ' at its version ' + c.version)),
    'none: every counted event was on time');
    $('explain-late-n').textContent = e.late.length;
    list('explain-late', e.late.map((l) => el('li', { 'data-event-id': l.event_id },
      el('code', {}, l.event_id), ' ' + l.reason + ', watermark ' + l.watermark.replace('T', ' '))),
    'none');
    $('explain-duplicates').textContent = e.duplicates;
    $('explain-conflicts-n').textContent = e.conflicts.length +
      (e.conflicts_unknown ? ' (maybe more: older rejected rows name no window, and the window\'s ledger is retired)' : '');
    list('explain-conflicts', e.conflicts.map((id) => el('li', { 'data-event-id': id }, el('code', {}, id))), 'none');
    $('explain-digest').textContent = e.digest;
    const p = e.parity;
    $('explain-parity').textContent = p ? p.verdict + (p.event_ids.length ? ' (' + p.event_ids.join(', ') + ')' : '')
      : 'no verdict here (receiptctl explain --parity FILE gives the referee\'s)';
  }

  function fail(msg) {
    $('explain-body').hidden = true;
    const e = $('explain-error');
    e.hidden = false;
    e.textContent = msg;
  }

  async function open(id, row) {
    opener = row;
    asked = id;
    $('explain-window').textContent = id;
    $('explain-status').textContent = 'loading…';
    $('explain-body').hidden = true;
    $('explain-error').hidden = true;
    drawer.hidden = false;
    drawer.dataset.window = id;
    drawer.dataset.state = 'loading';
    drawer.focus(); // the dialog, not its Close button: the Enter that opened it must not close it
    const why = await unavailable;
    if (asked !== id) return;
    if (why) {
      fail(why);
      drawer.dataset.state = 'error';
      return;
    }
    try {
      const r = await window.receiptflowAuth.fetch('/api/explain/' + encodeURIComponent(id), { cache: 'no-store' });
      const body = await r.json();
      if (asked !== id) return;
      if (!r.ok) {
        fail(body.error || ('HTTP ' + r.status));
        drawer.dataset.state = 'error';
        return;
      }
      show(body);
      drawer.dataset.state = 'loaded';
    } catch (err) {
      if (asked !== id) return;
      fail('could not reach the dashboard: ' + err);
      drawer.dataset.state = 'error';
    }
  }

  function close() {
    drawer.hidden = true;
    asked = '';
    // The table is redrawn with every view: the row that opened the drawer
    // may be a new element by now.
    const row = opener && opener.isConnected ? opener
      : document.querySelector('#windows-body tr[data-window-id="' + CSS.escape(drawer.dataset.window || '') + '"]');
    if (row) row.focus();
    opener = null;
  }

  function onRow(ev) {
    const tr = ev.target.closest('tr[data-window-id]');
    if (!tr || (ev.type === 'keydown' && ev.key !== 'Enter')) return;
    open(tr.dataset.windowId, tr);
  }

  $('windows-body').addEventListener('click', onRow);
  $('windows-body').addEventListener('keydown', onRow);
  $('explain-close').addEventListener('click', close);
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape' && !drawer.hidden) close();
  });
})();
