// receiptflow dashboard: the reader's token (docs/security.md, "Dashboard
// readers"). A dashboard started with --tokens-file serves its data only
// to readers with a token: this page asks for it once in a form, keeps it
// in sessionStorage (this tab, until it closes), sends it as
// `Authorization: Bearer <token>` with every fetch, and presents it to
// POST /api/session, whose HttpOnly, SameSite=Strict cookie (a random
// session id, not the token) admits the event stream, which cannot send a
// header. A dashboard without a tokens file answers that it needs none,
// and the form never shows. The other modules fetch through
// window.receiptflowAuth.fetch, which waits until the page is signed in;
// a 401 or 403 (a token revoked, a session expired) signs in again with
// the kept token, and asks for another when that is refused.
'use strict';

window.receiptflowAuth = (function () {
  const KEY = 'receiptflow.token';
  const $ = (id) => document.getElementById(id);
  const SAY = {
    needed: 'This dashboard shows its figures to readers with a token only: enter your reader\u2019s token.',
    refused: 'That token was refused: it is unknown or has been revoked. Enter a valid reader\u2019s token.',
    empty: 'Enter the token first.',
    forgotten: 'Token forgotten. Enter a reader\u2019s token to see the dashboard again.',
    unreachable: 'The dashboard could not be reached to check the token; trying again.',
  };

  let gate = null; // resolved while the page is signed in
  let opened = null; // gate's resolver while it is closed
  let required = false; // this dashboard asks for tokens
  let signing = false; // a sign-in is in flight
  const listeners = [];

  function closeGate() {
    if (!opened) gate = new Promise((resolve) => { opened = resolve; });
  }
  function openGate() {
    if (opened) {
      const o = opened;
      opened = null;
      o();
    }
  }
  function kept() {
    try { return sessionStorage.getItem(KEY) || ''; } catch (e) { return ''; }
  }
  function keep(token) {
    try {
      if (token) sessionStorage.setItem(KEY, token);
      else sessionStorage.removeItem(KEY);
    } catch (e) { /* storage off: the form asks again on the next load */ }
  }

  function ask(message) {
    closeGate();
    document.body.dataset.auth = 'ask';
    $('auth-message').textContent = message;
    $('auth').hidden = false;
    const input = $('auth-token');
    input.value = '';
    input.focus();
  }

  function signedIn(tokenRequired) {
    required = tokenRequired;
    document.body.dataset.auth = tokenRequired ? 'token' : 'none';
    $('auth').hidden = true;
    $('forget').hidden = !tokenRequired;
    openGate();
  }

  // signIn presents token ('' for none) to POST /api/session. It resolves
  // when the answer is handled: signed in, or the form shown. A network
  // error or another status (503 while the dashboard starts) tries again
  // a second later.
  function signIn(token) {
    signing = true;
    closeGate();
    const headers = token ? { Authorization: 'Bearer ' + token } : {};
    return fetch('/api/session', { method: 'POST', headers: headers, cache: 'no-store', credentials: 'same-origin' })
      .then((r) => {
        if (r.ok) {
          return r.json().then((b) => {
            keep(b.token_required ? token : '');
            signedIn(!!b.token_required);
          });
        }
        if (r.status === 401 || r.status === 403) {
          required = true;
          keep('');
          ask(token && r.status === 403 ? SAY.refused : SAY.needed);
          return null;
        }
        throw new Error('HTTP ' + r.status);
      })
      .catch(() => new Promise((resolve) => setTimeout(resolve, 1000)).then(() => signIn(token)))
      .finally(() => { signing = false; });
  }

  // refused is told of a 401 or 403 (or a stream the dashboard closed):
  // sign in again with the kept token, or ask for one. It returns the
  // promise of being signed in again.
  function refused() {
    if (!opened && !signing && required) signIn(kept());
    return gate;
  }

  // apiFetch is fetch with the token, once signed in; a refusal signs in
  // again (or asks) and tries once more.
  async function apiFetch(url, opts) {
    for (let attempt = 0; ; attempt++) {
      await gate;
      const o = Object.assign({}, opts);
      const token = kept();
      if (token) o.headers = Object.assign({}, o.headers, { Authorization: 'Bearer ' + token });
      const r = await fetch(url, o);
      if ((r.status !== 401 && r.status !== 403) || !required || attempt >= 2) return r;
      await refused();
    }
  }

  $('auth-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const token = $('auth-token').value.trim();
    if (!token) {
      $('auth-message').textContent = SAY.empty;
      return;
    }
    $('auth-submit').disabled = true;
    signIn(token).finally(() => { $('auth-submit').disabled = false; });
  });

  $('forget').addEventListener('click', () => {
    keep('');
    ask(SAY.forgotten);
    fetch('/api/session', { method: 'DELETE', cache: 'no-store', credentials: 'same-origin' }).catch(() => {});
    for (const fn of listeners) fn();
  });

  closeGate();
  signIn(kept());

  return {
    fetch: apiFetch,
    // ready is the promise of being signed in (at once when the page is).
    ready: () => gate,
    refused: refused,
    // onSignOut calls fn when the reader forgets the token.
    onSignOut: (fn) => listeners.push(fn),
  };
})();
