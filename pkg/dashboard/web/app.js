// receiptflow dashboard: renders the view pushed by /api/events (Server-
// Sent Events) into a plain-SVG chart, a table and a health panel. No
// dependencies; everything is built with DOM calls (never innerHTML), so a
// window id or a consumer name can never inject markup.
'use strict';

(function () {
  const SVG = 'http://www.w3.org/2000/svg';
  // Without a view for this long the page says it has lost the dashboard
  // and marks what it shows as stale instead of freezing silently.
  const LOST_AFTER_MS = 5000;

  const $ = (id) => document.getElementById(id);
  const zone = window.receiptflowZone; // the reader's time zone (zone.js)
  const auth = window.receiptflowAuth; // the reader's token (auth.js)
  let lastView = null;
  let lastViewAt = 0;
  let source = null;
  // paged is the page back in time being viewed (null: the live head):
  // its view and the stack of the "before" ids that led to it, so
  // "Newer" walks back the way "Older" came. While paged, live views are
  // kept (lastView) but not drawn.
  let paged = null;

  function el(tag, attrs, ...children) {
    const n = document.createElement(tag);
    setAttrs(n, attrs);
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      n.append(c instanceof Node ? c : String(c));
    }
    return n;
  }
  function sv(tag, attrs, text) {
    const n = document.createElementNS(SVG, tag);
    setAttrs(n, attrs);
    if (text !== undefined) n.textContent = String(text);
    return n;
  }
  function setAttrs(n, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      n.setAttribute(k, v === true ? 'true' : String(v));
    }
  }

  // --- time formatting -------------------------------------------------
  function validTime(iso) {
    if (!iso) return null;
    const d = new Date(iso);
    const y = d.getUTCFullYear();
    return isNaN(d) || y <= 1970 ? null : d;
  }
  function fmtTime(iso) {
    const d = validTime(iso);
    if (!d) return '–';
    if (d.getUTCFullYear() >= 9999) return 'end of stream';
    return d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
  }
  function ago(iso, nowIso) {
    const d = validTime(iso);
    if (!d) return '';
    const s = Math.round((new Date(nowIso) - d) / 1000);
    if (s < 0) return 'just now';
    if (s < 90) return s + 's ago';
    if (s < 5400) return Math.round(s / 60) + 'm ago';
    return Math.round(s / 3600) + 'h ago';
  }
  // shortTime drops the date when it is the same as ref's.
  function shortTime(iso, ref) {
    const full = fmtTime(iso);
    const r = fmtTime(ref);
    return full.slice(0, 10) === r.slice(0, 10) ? full.slice(11) : full;
  }
  function ahead(ms) {
    if (ms <= 0) return 'holds it';
    const s = ms / 1000;
    if (s < 90) return '+' + (s < 10 ? s.toFixed(1) : Math.round(s)) + 's';
    if (s < 5400) return '+' + Math.round(s / 60) + 'm';
    return '+' + Math.round(s / 3600) + 'h';
  }
  function hourLabel(iso) {
    return zone.hour(iso); // the local hour (zone.js)
  }
  function range(w) {
    return hourLabel(w.start) + ':00–' + hourLabel(w.end) + ':00';
  }

  // plural is n and the noun for n: '1 window', '2 windows' (many
  // defaults to one + 's').
  function plural(n, one, many) {
    return n + ' ' + (n === 1 ? one : (many || one + 's'));
  }

  // announce tells the page's other modules (days.js) of a live view.
  function announce(v) {
    document.dispatchEvent(new CustomEvent('receiptflow:view', { detail: v }));
  }

  // --- connection state ------------------------------------------------
  function setPill(id, state, text) {
    const p = $(id);
    p.dataset.state = state;
    p.textContent = text;
  }

  // connect opens the live stream once the page is signed in (auth.js:
  // the session cookie admits it). A stream the dashboard refuses or ends
  // (a revoked token, an expired session, a restart) is closed for good
  // by the browser: the page signs in again and reconnects.
  let connecting = 0;
  function connect() {
    if (source) source.close();
    source = null;
    const attempt = ++connecting;
    auth.ready().then(() => {
      if (attempt === connecting) open();
    });
  }
  function open() {
    const es = new EventSource('/api/events');
    source = es;
    es.addEventListener('view', (ev) => {
      let v;
      try { v = JSON.parse(ev.data); } catch (e) { return; }
      lastView = v;
      lastViewAt = Date.now();
      announce(v);
      setPill('conn', 'live', 'live');
      if (!paged) render(v, false);
    });
    es.onerror = () => {
      if (Date.now() - lastViewAt > LOST_AFTER_MS) setPill('conn', 'reconnecting', 'reconnecting…');
      if (es.readyState === EventSource.CLOSED && source === es) {
        source = null;
        setTimeout(() => auth.refused().then(() => { if (!source) connect(); }), 1000);
      }
    };
  }
  auth.onSignOut(connect);

  // The page's own freshness check: a silent dashboard is stale too.
  setInterval(() => {
    if (!lastView) return;
    if (Date.now() - lastViewAt > LOST_AFTER_MS) {
      setPill('conn', 'lost', 'no updates');
      if (!paged) render(lastView, true);
    }
  }, 1000);

  // --- rendering -------------------------------------------------------
  function render(v, lost) {
    const stale = v.stale || lost;
    document.body.dataset.ready = v.loaded ? 'true' : 'false';
    document.body.dataset.stale = stale ? 'true' : 'false';
    $('gen').textContent = 'generation ' + (v.generation || '–');
    if (v.connected) setPill('nats', 'connected', 'NATS connected');
    else setPill('nats', 'disconnected', 'NATS disconnected');
    $('clock').textContent = fmtTime(v.now);

    const banner = $('stale-banner');
    banner.hidden = !stale;
    $('stale-reason').textContent = lost
      ? 'this page has had no update from the dashboard since ' + fmtTime(v.now)
      : (v.stale_reason || 'the data is stale');

    renderChart(v, lost);
    renderTable(v, lost);
    renderStores(v);
    renderHealth(v);
    renderPager(v);
  }

  // The window whose stores are shown: the one picked in the table, else
  // the newest with data.
  let pickedWindow = null;
  const topStores = 5;

  function cents(n) {
    const neg = n < 0;
    const a = Math.abs(n);
    const s = Math.floor(a / 100).toLocaleString('en-US') + '.' + String(a % 100).padStart(2, '0');
    return (neg ? '−' : '') + s;
  }

  function renderStores(v) {
    const ws = v.windows || [];
    let w = ws.find((x) => x.window_id === pickedWindow);
    if (!w) {
      pickedWindow = null;
      w = ws.find((x) => x.count > 0) || ws[0];
    }
    for (const tr of $('windows-body').rows) {
      tr.classList.toggle('picked', !!w && tr.dataset.windowId === w.window_id);
    }
    const body = $('stores').tBodies[0];
    if (!w) {
      $('stores-window').textContent = '–';
      body.replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: 5 }, 'no window yet')));
      $('stores-total').textContent = '';
      return;
    }
    $('stores-window').textContent = 'window ' + w.window_id + (pickedWindow ? ' (picked)' : ' (newest with data)');
    const list = (w.by_store || []).slice(0, topStores);
    if (list.length === 0) {
      body.replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: 5 }, 'no submission counted')));
    } else {
      body.replaceChildren(...list.map((st) => el('tr', { 'data-store': st.store },
        el('td', {}, st.store === '' ? '(unknown store)' : st.store),
        el('td', { class: 'num' }, st.count),
        el('td', { class: 'num' }, w.count > 0 ? Math.round(100 * st.count / w.count) + '%' : '–'),
        el('td', { class: 'num' }, cents(st.amount_cents)),
        el('td', { class: 'num' }, st.unpriced))));
    }
    const rest = (w.store_count || 0) - list.length;
    const restCount = w.count - list.reduce((n, st) => n + st.count, 0);
    $('stores-total').textContent = (rest > 0 ? '+ ' + rest + ' other store' + (rest === 1 ? '' : 's') +
      ' with ' + restCount + ' submission' + (restCount === 1 ? '' : 's') + '. ' : '') +
      'Window total ' + cents(w.amount_cents || 0) + ' over ' + (w.store_count || 0) + ' store' +
      (w.store_count === 1 ? '' : 's') + (w.unpriced > 0 ? '; ' + w.unpriced + ' submission' +
      (w.unpriced === 1 ? '' : 's') + ' without an amount' : '') + '. Click a window to see its stores.';
  }

  // --- paging back in time ---------------------------------------------
  function renderPager(v) {
    const ws = v.windows || [];
    document.body.dataset.live = paged ? 'false' : 'true';
    $('older').disabled = !v.older || ws.length === 0;
    $('newer').disabled = !paged;
    $('chart-title').textContent = paged ? '24 hours to ' + (ws.length ? ws[0].window_id : paged.stack[paged.stack.length - 1]) : 'Last 24 hours';
    $('history-banner').hidden = !paged;
    if (paged) {
      $('history-range').textContent = ws.length
        ? ws[ws.length - 1].window_id + ' – ' + ws[0].window_id
        : 'before ' + paged.stack[paged.stack.length - 1];
    }
  }

  function showPage(stack) {
    const before = stack[stack.length - 1];
    const size = Number(document.body.dataset.recent) || 48;
    return auth.fetch('/api/windows?before=' + encodeURIComponent(before) + '&limit=' + size, { cache: 'no-store' })
      .then((r) => (r.ok ? r.json() : null))
      .then((v) => {
        if (!v) return;
        paged = { stack: stack, view: v };
        render(v, false);
      })
      .catch(() => {});
  }

  function backToLive() {
    paged = null;
    if (lastView) render(lastView, Date.now() - lastViewAt > LOST_AFTER_MS);
  }

  $('older').addEventListener('click', () => {
    const v = paged ? paged.view : lastView;
    const ws = (v && v.windows) || [];
    if (!ws.length) return;
    showPage((paged ? paged.stack : []).concat([ws[ws.length - 1].window_id]));
  });
  $('newer').addEventListener('click', () => {
    if (!paged) return;
    const stack = paged.stack.slice(0, -1);
    if (stack.length === 0) backToLive();
    else showPage(stack);
  });
  $('live').addEventListener('click', backToLive);

  function windowStale(w, lost) {
    return w.stale || (lost && !w.final);
  }

  function renderChart(v, lost) {
    const svg = $('chart');
    // One user unit is one CSS pixel: the chart is drawn for the width it
    // has (redrawn on resize), so its labels keep their CSS font size on
    // a phone instead of shrinking with a fixed viewBox.
    const W = Math.max(Math.round(svg.getBoundingClientRect().width) || 760, 240);
    const H = 270, left = 40, right = 10, bottom = 34;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const hours = v.hours || [];
    const slot = (W - left - right) / Math.max(hours.length, 1);
    const barW = Math.max(slot * 0.68, 4);
    // Too narrow for a count beside its neighbour's: written upwards,
    // with room above the tallest bar for it.
    const upright = slot >= 30;
    const top = upright ? 26 : 48;
    // The scale follows the final windows, so that the live hour filling
    // up does not shrink every final bar; a provisional bar above it is
    // clipped and marked. Without a final window, every bar counts.
    let max = 0, maxAll = 0;
    for (const h of hours) {
      maxAll = Math.max(maxAll, h.count);
      if (h.state === 'final') max = Math.max(max, h.count);
    }
    const scaleMax = niceMax(max || maxAll);
    const y = (n) => top + (H - top - bottom) * (1 - n / scaleMax);
    const base = y(0);

    const nodes = [];
    const defs = sv('defs');
    defs.append(hatch('hatch-provisional', '#d98a06', '#fff4dc'));
    defs.append(hatch('hatch-stale', '#8a94a3', '#eef0f3'));
    nodes.push(defs);
    for (const f of [0, 0.5, 1]) {
      const val = Math.round(scaleMax * f);
      nodes.push(sv('line', { class: 'gridline', x1: left, x2: W - right, y1: y(val), y2: y(val) }));
      nodes.push(sv('text', { x: left - 6, y: y(val) + 3, 'text-anchor': 'end' }, val));
    }
    nodes.push(sv('line', { class: 'axis', x1: left, x2: W - right, y1: base, y2: base }));

    hours.forEach((h, i) => {
      const x = left + i * slot + (slot - barW) / 2;
      const cx = x + barW / 2;
      const stale = h.stale || (lost && h.state !== 'final' && h.state !== 'confirmed_zero');
      const g = sv('g', {
        class: 'bar ' + h.state + (stale ? ' stale' : ''),
        'data-window-id': h.window_id, 'data-state': h.state, 'data-stale': stale ? 'true' : 'false',
      });
      const title = sv('title', {}, barTitle(h, stale));
      g.append(title);
      if (h.state === 'final' || h.state === 'provisional') {
        const clipped = h.count > scaleMax;
        const top_ = clipped ? y(scaleMax) : Math.min(y(h.count), base - 2);
        const fill = stale ? 'url(#hatch-stale)' : h.state === 'final' ? '#1f5fd1' : 'url(#hatch-provisional)';
        g.append(sv('rect', { class: 'body', x: x, y: top_, width: barW, height: base - top_, rx: 2, fill: fill }));
        if (clipped) {
          // Taller than the scale: cut at its top, a break mark across it.
          g.setAttribute('data-clipped', 'true');
          g.append(sv('path', { class: 'clip-mark', d: 'M' + (x - 1) + ' ' + (top_ + 7) + 'l' + (barW + 2) + ' -5m' + -(barW + 2) + ' 9l' + (barW + 2) + ' -5' }));
        }
        if (upright) {
          g.append(sv('text', { class: 'count', x: cx, y: top_ - 4, 'text-anchor': 'middle' }, h.count + (clipped ? '↑' : '')));
        } else {
          const label = sv('text', { class: 'count', x: cx + 4, y: top_ - 4, 'text-anchor': 'start',
            transform: 'rotate(-90 ' + (cx + 4) + ' ' + (top_ - 4) + ')' }, h.count + (clipped ? '↑' : ''));
          // Too narrow for a badge of its own: the correction is written
          // on the bar's own label, never beside a neighbour's.
          if (h.corrected_by > 0) label.append(sv('tspan', { class: 'corr-inline' }, ' +' + h.corrected_by));
          g.append(label);
        }
        if (h.corrected_by > 0 && upright) {
          const label = '+' + h.corrected_by;
          const cw = Math.max(label.length * 7 + 4, 18);
          const cy = Math.max(top_ - 32, 2);
          g.append(sv('rect', { class: 'corr', x: cx - cw / 2, y: cy, width: cw, height: 15, rx: 3 }));
          g.append(sv('text', { class: 'corr', x: cx, y: cy + 11.5, 'text-anchor': 'middle' }, label));
        }
      } else if (h.state === 'confirmed_zero') {
        g.append(sv('rect', { class: 'zero-line', x: x, y: base - 2, width: barW, height: 2 }));
        g.append(sv('text', { class: 'zero', x: cx, y: base - 6, 'text-anchor': 'middle' }, '0✓'));
      } else {
        g.append(sv('rect', { class: 'nodata', x: x, y: base - 22, width: barW, height: 22, rx: 2 }));
        g.append(sv('text', { class: 'nodata', x: cx, y: base - 8, 'text-anchor': 'middle' }, '?'));
      }
      const every = slot >= 12 ? 3 : 4;
      if (i % every === 0 || i === hours.length - 1) {
        g.append(sv('text', { x: cx, y: base + 14, 'text-anchor': 'middle' }, hourLabel(h.start)));
      }
      nodes.push(g);
    });
    if (hours.length) {
      nodes.push(sv('text', { x: left, y: H - 4 }, zone.date(hours[0].start) + ' → ' +
        zone.date(hours[hours.length - 1].start) + ' (' + zone.name() + ' hours)'));
    }
    svg.replaceChildren(...nodes);
  }

  function barTitle(h, stale) {
    const what = {
      final: 'final: ' + h.count,
      provisional: 'provisional (' + h.status + '): ' + h.count,
      confirmed_zero: 'confirmed zero: final, no events',
      no_data: 'no data: not final yet, or before the first event; not a zero',
    }[h.state] || h.state;
    return h.window_id + ' (' + zone.label(h.start) + ') — ' + what + (h.corrected_by > 0 ? ', corrected +' + h.corrected_by : '') +
      (stale ? ' — STALE' : '');
  }

  function hatch(id, ink, paper) {
    const p = sv('pattern', { id: id, width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' });
    p.append(sv('rect', { width: 6, height: 6, fill: paper }));
    p.append(sv('rect', { width: 2.5, height: 6, fill: ink }));
    return p;
  }

  function niceMax(n) {
    if (n <= 4) return 4;
    const p = Math.pow(10, Math.floor(Math.log10(n)));
    for (const m of [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10]) {
      if (m * p >= n) return m * p;
    }
    return 10 * p;
  }

  function renderTable(v, lost) {
    const body = $('windows-body');
    const ws = v.windows || [];
    $('window-count').textContent = paged ? ws.length + ' of ' + plural(v.total_windows, 'window') + ' held'
      : ws.length < v.total_windows
      ? 'newest ' + ws.length + ' of ' + v.total_windows : plural(v.total_windows, 'window');
    if (ws.length === 0) {
      body.replaceChildren(el('tr', { class: 'empty' }, el('td', { colspan: 8 }, v.loaded ? 'no windows yet' : 'waiting for data…')));
      return;
    }
    const rows = ws.map((w) => {
      const stale = windowStale(w, lost);
      const cls = [w.final ? 'final' : 'provisional'];
      if (stale) cls.push('stale');
      if (w.corrected_by > 0) cls.push('corrected');
      const status = el('td', { class: 'c-status' });
      if (w.final) status.append(el('span', { class: 'badge final' }, '✓ final'));
      else status.append(el('span', { class: 'badge provisional' }, 'provisional · ' + w.status.replace('_', ' ')));
      if (stale) status.append(el('span', { class: 'badge stale' }, 'stale'));
      const corr = el('td', { class: 'c-corr' });
      if (w.corrected_by > 0 || w.corrections > 0) {
        // corrected_by is the change after the first hourly output; late
        // events counted before it changed no number a reader had seen.
        if (w.corrected_by > 0) corr.append(el('span', { class: 'badge corrected' }, 'corrected +' + w.corrected_by));
        const parts = [w.corrections + ' late event' + (w.corrections === 1 ? '' : 's') + ' counted' +
          (w.corrected_by > 0 ? '' : ' before the first output')];
        if (w.first_output_count !== undefined && w.first_output_count !== null) {
          parts.push('first output ' + w.first_output_count + ' at v' + w.first_output_version);
        }
        corr.append(el('span', { class: 'detail' }, parts.join('; ')));
      } else {
        corr.append(el('span', { class: 'muted' }, '—'));
      }
      const late = el('td', { class: 'c-late num' });
      late.append(w.late_dropped > 0 ? el('span', { class: 'badge late' }, w.late_dropped) : '0');
      return el('tr', {
        class: cls.join(' '), 'data-window-id': w.window_id, 'data-status': w.status, tabindex: '0',
        'data-final': w.final ? 'true' : 'false', 'data-stale': stale ? 'true' : 'false',
        'data-corrected-by': w.corrected_by,
      },
      windowCell(w),
      el('td', { class: 'c-count num' }, w.count),
      el('td', { class: 'c-version num' }, w.version),
      status, corr, late,
      el('td', { class: 'c-wm' }, fmtTime(w.watermark)),
      el('td', { class: 'c-updated' }, fmtTime(w.updated_at), ' ', el('span', { class: 'detail' }, ago(w.updated_at, v.now))));
    });
    // A row that has the focus (a keyboard reader, or the row the
    // explanation drawer gave the focus back to) keeps it across the
    // redraw: its new element takes it.
    const had = document.activeElement && body.contains(document.activeElement)
      ? document.activeElement.closest('tr[data-window-id]') : null;
    body.replaceChildren(...rows);
    if (had) {
      const again = body.querySelector('tr[data-window-id="' + CSS.escape(had.dataset.windowId) + '"]');
      if (again) again.focus({ preventScroll: true });
    }
  }

  // --- the reader's time zone (zone.js) ------------------------------
  // The window cell: in UTC its id and hours; in another zone its local
  // start (history.HourLabel's label) and its id. data-local always holds
  // the label.
  function windowCell(w) {
    const label = zone.label(w.start);
    const td = el('td', { class: 'c-window', 'data-local': label, title: w.window_id + ' (UTC) = ' + label });
    if (zone.name() === 'UTC') td.append(w.window_id, el('span', { class: 'range' }, range(w)));
    else td.append(el('span', { class: 'local' }, label), el('span', { class: 'range' }, w.window_id + ' UTC'));
    return td;
  }
  zone.onChange(() => {
    document.querySelector('th.c-window').textContent = 'Window (' + zone.name() + ')';
    if (paged) render(paged.view, false);
    else if (lastView) render(lastView, Date.now() - lastViewAt > LOST_AFTER_MS);
  });
  document.querySelector('th.c-window').textContent = 'Window (' + zone.name() + ')';

  function pick(ev) {
    const tr = ev.target.closest('tr[data-window-id]');
    if (!tr || (ev.type === 'keydown' && ev.key !== 'Enter' && ev.key !== ' ')) return;
    if (ev.type === 'keydown') ev.preventDefault();
    pickedWindow = tr.dataset.windowId;
    const v = paged ? paged.view : lastView; // the page shown: history, or live
    if (v) renderStores(v);
  }

  // renderAlerts fills the health panel's Alerts row from v.alerts: the
  // firing and pending receiptflow alerts Prometheus reported at the last
  // poll, or why there are none to show. Alerts of a failed poll are never
  // shown as current: only when the last good poll was.
  function renderAlerts(v) {
    const a = v.alerts || { status: 'not_configured', alerts: [] };
    const dd = $('h-alerts');
    const list = a.alerts || [];
    dd.dataset.status = a.status;
    dd.dataset.firing = list.filter((x) => x.state === 'firing').length;
    dd.dataset.pending = list.filter((x) => x.state === 'pending').length;
    const checked = a.checked_at ? el('span', { class: 'detail' }, 'checked ' + ago(a.checked_at, v.now)) : null;
    switch (a.status) {
      case 'not_configured':
        dd.replaceChildren(el('span', { class: 'muted' }, 'alerts not configured'));
        return;
      case 'waiting':
        dd.replaceChildren(el('span', { class: 'muted' }, 'checking alerts…'));
        return;
      case 'unavailable':
        dd.replaceChildren(el('span', { class: 'alerts-unavailable' }, 'alerts unavailable: ' + (a.error || 'unknown error')), ' ',
          el('span', { class: 'detail' }, a.fetched_at
            ? 'last fetched ' + fmtTime(a.fetched_at) + ' (' + ago(a.fetched_at, v.now) + ')'
            : 'never fetched'));
        return;
    }
    if (list.length === 0) {
      dd.replaceChildren(el('span', { class: 'alerts-none' }, 'no alerts firing'), ' ', checked);
      return;
    }
    const items = list.map((x) => el('div', {
      class: 'alert ' + x.state + ' sev-' + (x.severity || 'none'),
      'data-alert-name': x.name, 'data-state': x.state, 'data-severity': x.severity || '',
      title: x.description || '',
    },
    x.state === 'firing'
      ? el('span', { class: 'badge firing' }, 'firing')
      : el('span', { class: 'badge pending' }, 'pending'),
    x.severity ? el('span', { class: 'severity' }, x.severity) : null, ' ',
    el('strong', { class: 'alert-name' }, x.name), ' ',
    el('span', { class: 'alert-summary' }, x.summary || ''), ' ',
    el('span', { class: 'detail' }, 'since ' + shortTime(x.active_at, v.now) + ' (' + ago(x.active_at, v.now) + ')')));
    dd.replaceChildren(...items, checked);
  }

  // renderRejected fills the Rejected row from the publisher's tally of
  // REJECTED by reason (meta.rejected), most frequent reason first.
  function renderRejected(r) {
    const dd = $('h-rejected');
    dd.dataset.total = r ? r.total : '';
    if (!r) {
      dd.replaceChildren(el('span', { class: 'muted' }, 'not counted yet'));
      return;
    }
    const reasons = Object.entries(r.by_reason || {}).filter(([, n]) => n > 0)
      .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
    const gone = r.expired_uncounted ? '; ' + r.expired_uncounted + ' more left REJECTED before they were counted' : '';
    dd.replaceChildren(...(reasons.length ? reasons.map(([reason, n]) => el('span', { class: 'badge rejected', 'data-reason': reason, 'data-count': n }, reason + ' ' + n), ' ')
      : ['none ']),
    el('span', { class: 'detail' }, plural(r.total, 'record') + ' rejected in all, kept in REJECTED' + gone));
  }

  // renderOwners fills the health panel's Owners row from v.owners (the
  // generation's lease bucket): per kind, each partition's holder and how
  // long it has held it, the partitions nobody holds, or that the kind runs
  // on static indices and has no leases.
  function renderOwners(v) {
    const o = v.owners || { status: 'waiting', kinds: [] };
    const dd = $('h-owners');
    dd.dataset.status = o.status;
    if (o.status === 'waiting') {
      dd.replaceChildren(el('span', { class: 'muted' }, 'reading the leases…'));
      return;
    }
    if (o.status === 'unavailable') {
      dd.replaceChildren(el('span', { class: 'owners-unavailable' }, 'leases unavailable: ' + (o.error || 'unknown error')));
      return;
    }
    const held = (iso) => ago(iso, v.now).replace(' ago', '').replace('just now', '0s');
    dd.replaceChildren(...(o.kinds || []).map((k) => {
      const line = el('div', { class: 'owners', 'data-kind': k.kind, 'data-mode': k.mode, 'data-members': k.members },
        el('span', { class: 'owners-kind' }, k.kind), ' ');
      if (k.mode === 'static') {
        line.append(el('span', { class: 'muted' }, 'static indices (--instance/--instances), no leases'));
        return line;
      }
      if (k.mode === 'no_member') {
        line.append(el('span', { class: 'owners-none' }, 'no live group member'), ' ',
          el('span', { class: 'detail' }, 'its partitions are served by --instance/--instances processes, or by nobody'));
        return line;
      }
      line.append(el('span', { class: 'detail' }, plural(k.members, 'member')), ' ');
      for (const p of k.partitions || []) {
        line.append(p.member
          ? el('span', {
            class: 'owner', 'data-partition': p.partition, 'data-member': p.member,
            title: 'epoch ' + p.epoch + (p.address ? ' · ' + p.address : '') + ' · renewed ' + ago(p.renewed, v.now),
          }, 'p' + p.partition + ' ', el('b', {}, p.member), ' ', el('span', { class: 'detail' }, held(p.acquired)))
          : el('span', { class: 'owner free', 'data-partition': p.partition }, 'p' + p.partition + ' ',
            el('span', { class: 'badge free' }, 'nobody')), ' ');
      }
      return line;
    }));
  }

  function renderHealth(v) {
    const h = v.health;
    const set = (id, ...content) => $(id).replaceChildren(...content.map((c) => (c instanceof Node ? c : String(c))));
    renderAlerts(v);
    renderOwners(v);
    set('h-watch', v.watch.reloads + ' re-watch' + (v.watch.reloads === 1 ? '' : 'es') +
      (v.watch.last_reason ? ' (last: ' + v.watch.last_reason + ' ' + ago(v.watch.last_reload, v.now) + ')' : ''));
    $('h-watch').dataset.reloads = v.watch.reloads;
    if (!h) {
      for (const id of ['h-global-wm', 'h-source', 'h-report', 'h-late', 'h-rejected', 'h-corrections', 'h-correction-backlog', 'h-state', 'h-hottest']) set(id, '–');
      // A fresh deployment: no report yet, and not stale until stale_after.
      if (v.starting) set('h-report', el('span', { class: 'starting' }, 'starting: waiting for the first report'));
      $('partitions').tBodies[0].replaceChildren();
      $('backlog').tBodies[0].replaceChildren();
      return;
    }
    if (h.watermark_ahead_ms > 0) {
      // A future-dated input moved a watermark past the clock: windows
      // close (turn final) before their hour has passed.
      set('h-global-wm', fmtTime(h.global_watermark), ' ',
        el('span', { id: 'h-ahead', class: 'badge late', title: 'a future-dated input moved the watermark past the clock; windows close early' },
          'watermark ahead of clock by ' + ahead(h.watermark_ahead_ms).replace('+', '') + ' (' +
          (h.watermark_ahead_partitions || []).map((p) => 'p' + p).join(', ') + ')'));
    } else {
      set('h-global-wm', fmtTime(h.global_watermark));
    }
    set('h-source', fmtTime(h.source_last_seen), ' ', el('span', { class: 'detail' }, ago(h.source_last_seen, v.now) + ' · stale after ' + h.stale_after));
    // The writers of RAW holding a partition's watermark (docs/spec.md §3.1).
    const live = new Set();
    for (const ps of h.sources || []) for (const s of ps.sources || []) if (s.live) live.add(s.id || '(no id)');
    set('h-sources', String(h.live_sources || 0), ' ', el('span', { class: 'detail', title: [...live].sort().join('\n') },
      (h.live_sources === 1 ? 'source holds' : 'sources hold') + ' the watermarks'));
    set('h-report', fmtTime(h.updated_at), ' ', el('span', { class: 'detail' }, ago(h.updated_at, v.now)));
    set('h-late', (h.late_per_minute || 0) + ' / min', ' ', el('span', { class: 'detail' }, h.late_total + ' routed to LATE in all'));
    renderRejected(h.rejected);
    set('h-corrections', (h.corrections_per_minute || 0) + ' / min', ' ', el('span', { class: 'detail' }, h.corrections + ' counted as corrections in all'));
    set('h-correction-backlog', h.correction_backlog || 0, ' ', el('span', { class: 'detail' }, ((h.correction_backlog || 0) === 1 ? 'late event' : 'late events') + ' awaiting offline recomputation'));
    // h.windows counts window states per partition (a window with events
    // in 4 partitions is 4), not the windows of the table.
    set('h-state', plural(h.ledger_entries, 'ledger entry', 'ledger entries') + ' · ' +
      plural(h.windows, 'window partial') + ' in Redis', ' ',
      el('span', { class: 'detail' }, 'one per window and partition with events, until retired'));
    const hot = h.hottest_partitions || [];
    set('h-hottest', ...(hot.length ? hot.map((p) => el('span', { class: 'badge hot' }, 'p' + p.partition + ': ' + p.recent + '/min')) : ['none (idle)']));

    const gw = validTime(h.global_watermark);
    const recent = h.partition_recent || [];
    const hotSet = new Set(hot.map((p) => p.partition));
    $('partitions').tBodies[0].replaceChildren(...(h.watermarks || []).map((wm, p) => {
      const d = validTime(wm);
      return el('tr', { 'data-partition': p },
        el('td', {}, 'p' + p, hotSet.has(p) ? el('span', { class: 'badge hot' }, 'hot') : null),
        el('td', { title: fmtTime(wm) }, shortTime(wm, h.global_watermark)),
        el('td', {}, d && gw ? ahead(d - gw) : '–'),
        el('td', { class: 'num' }, recent[p] !== undefined ? recent[p] : '–'));
    }));

    const groups = new Map();
    for (const [name, n] of Object.entries(h.backlog || {}).sort()) {
      const svc = name.replace(/-p\d+$/, '').replace(/-g[^-]+$/, '');
      if (!groups.has(svc)) groups.set(svc, []);
      groups.get(svc).push([name, n]);
    }
    $('backlog').tBodies[0].replaceChildren(...[...groups].map(([svc, list]) => {
      const total = list.reduce((a, [, n]) => a + n, 0);
      return el('tr', { 'data-service': svc },
        el('td', {}, svc),
        el('td', { class: 'num' }, total),
        el('td', { class: 'detail' }, list.map(([name, n]) => name.replace(svc + '-', '') + ' ' + n).join(' · ')));
    }));
  }

  $('windows-body').addEventListener('click', pick);
  $('windows-body').addEventListener('keydown', pick);

  // Redraw the chart for its new width.
  let resizing = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      if (paged) renderChart(paged.view, false);
      else if (lastView) renderChart(lastView, Date.now() - lastViewAt > LOST_AFTER_MS);
    }, 100);
  });

  // Render what the dashboard holds now from /api/windows, then follow
  // the live stream: the page is not blank while the stream connects, or
  // where a proxy holds the stream back (the page then says it has no
  // live updates, as for a lost stream).
  const recent = Number(document.body.dataset.recent) || 48;
  auth.fetch('/api/windows?recent=' + recent, { cache: 'no-store' })
    .then((r) => (r.ok ? r.json() : null))
    .then((v) => {
      if (v && !lastView) {
        lastView = v;
        lastViewAt = Date.now();
        announce(v);
        render(v, false);
      }
    })
    .catch(() => {})
    .finally(connect);
})();
