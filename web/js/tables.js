// Drawing the database state (GET /demo/state) as tables.

import { t, escapeHtml as esc, fmtAmount, fmtTime, fmtDateTime, fmtSpan } from './i18n.js';

/** The first 8 characters of an id or key, coloured by its value so equal ids look equal. */
export function idChip(id, { testid = null } = {}) {
  if (id === null || id === undefined || id === '') return '<span class="null">null</span>';
  const s = String(id);
  const short = s.length > 10 ? `${s.slice(0, 8)}…` : s;
  const tid = testid ? ` data-testid="${testid}"` : '';
  return `<code class="id" style="--hue:${hue(s)}" title="${esc(s)}" data-full="${esc(s)}"${tid}>${esc(short)}</code>`;
}

export function hue(s) {
  let h = 2166136261;
  for (const ch of String(s)) h = Math.imul(h ^ ch.codePointAt(0), 16777619);
  return Math.abs(h) % 360;
}

export function shortKey(key) {
  const s = String(key ?? '');
  return s.length > 10 ? `${s.slice(0, 8)}…` : s;
}

/**
 * One-line summary of what this run added, e.g. "this run: 2 new charges, 1
 * new key": the rows of `state` that are not in `baseline` (the ids seen when
 * the run began), so a card never counts what an earlier experiment left.
 * With `refunds`, the run's refunds too; with `network`, its authorizations.
 */
export function summarize(state, { network = false, baseline = null, refunds = false } = {}) {
  if (!state) return '';
  const fresh = (ids) => (baseline ? ids.filter((id) => !baseline.has(id)) : ids).length;
  const charges = fresh(state.charges.map((c) => c.id));
  const keys = fresh(state.idempotency_keys.map((k) => `key:${k.key}`));
  let s = t('summary.db', { charges, keys });
  const refundsNew = fresh((state.refunds ?? []).map((r) => `refund:${r.id}`));
  if (refunds || refundsNew) s += t('summary.refunds', { n: refundsNew });
  const unguarded = fresh((state.unguarded_keys ?? []).map((u) => `unguarded:${u.key}:${u.charge_id}`));
  if (unguarded) s += t('summary.unguarded', { n: unguarded });
  if (network && state.network?.authorizations) s += t('summary.authorizations', { n: authorizationsSince(state, baseline).length });
  return s;
}

/**
 * The card network's authorizations that are not in `baseline` (all of
 * them without one), newest first. Reset demo data empties our tables,
 * not the network's ledger, which is another company's: a run shows the
 * authorizations made since it began.
 */
export function authorizationsSince(state, baseline) {
  const all = state?.network?.authorizations ?? [];
  return baseline ? all.filter((a) => !baseline.has(`auth:${a.id}`)) : all;
}

/** Milliseconds since the epoch of an RFC 3339 time (microseconds are cut to milliseconds). */
export function timeOf(iso) {
  if (!iso) return NaN;
  return Date.parse(String(iso).replace(/(\.\d{3})\d+/, '$1'));
}

/**
 * The server's clock when it answered `state` (its `now`), else the page's
 * clock: the times in a snapshot are told relative to this.
 */
export function nowOf(state) {
  const now = timeOf(state?.now);
  return Number.isNaN(now) ? Date.now() : now;
}

/**
 * A time as "in 23 h 59 min" / "expired 1 s ago" against the server's
 * `now`, with the absolute time on a second line and in the title.
 *  kind: 'expiry' (a key's expires_at) or 'lease' (key-first's locked_until).
 */
function relativeCell(iso, now, kind) {
  const at = timeOf(iso);
  if (Number.isNaN(at)) return `<span class="null">${esc(iso ?? 'null')}</span>`;
  const ms = at - now;
  const future = ms > 0;
  const text = t(`rel.${kind}.${future ? 'future' : 'past'}`, { span: fmtSpan(Math.abs(ms)) });
  const abs = fmtDateTime(iso);
  return `<span class="rel ${future ? 'rel-future' : 'rel-past'}" data-testid="${kind}-relative" data-ms="${Math.round(ms)}">${esc(text)}</span>`
    + `<span class="abs" title="${esc(iso)}">${esc(abs)}</span>`;
}

/**
 * The tables of `state` as HTML. Rows whose id is not in `baseline` (a Set
 * of charge ids, keys and unguarded row ids seen when the run started) are
 * marked new.
 */
export function renderState(state, { baseline = null, compact = false, context = '', refunds = false, network = false, locks = false } = {}) {
  const now = nowOf(state);
  const showRefunded = !network && state.charges.some((c) => c.amount_refunded !== undefined);
  // A charge's status only says something once one failed (a decline).
  const showStatus = state.charges.some((c) => c.status === 'failed');
  const isNew = (id) => baseline !== null && !baseline.has(id);
  const badge = (id) => (isNew(id) ? ` <span class="badge-new">${esc(t('tbl.new'))}</span>` : '');
  const rowClass = (id) => (isNew(id) ? ' class="is-new"' : '');

  const charges = state.charges
    .map(
      (c) => `<tr data-testid="charge-row" data-id="${esc(c.id)}"${rowClass(c.id)}>
        <td>${idChip(c.id)}${badge(c.id)}</td>
        <td class="num">${esc(fmtAmount(c.amount, c.currency))}</td>
        ${showRefunded ? `<td class="num" data-testid="amount-refunded" data-amount="${Number(c.amount_refunded)}">${esc(fmtAmount(c.amount_refunded, c.currency))}</td>` : ''}
        ${showStatus ? `<td class="wrap" data-testid="charge-status" data-status="${esc(c.status)}"><span class="pill pill-${esc(c.status)}">${esc(c.status)}</span>${c.failure_code ? `<code class="failure-code">${esc(c.failure_code).replaceAll('_', '_<wbr>')}</code>` : ''}</td>` : ''}
        ${network ? `<td data-testid="authorization-id" data-id="${esc(c.authorization_id ?? '')}">${idChip(c.authorization_id)}</td>` : ''}
        <td class="desc">${esc(c.description ?? '')}</td>
        <td class="time">${esc(fmtTime(c.created_at))}</td></tr>`,
    )
    .join('');

  // The lease (key-first) only means something while a row is in progress:
  // such a row tells it under its status (live or over, and when it ends by
  // the server's clock), so the table needs no column of its own for it.
  const keys = state.idempotency_keys
    .map((k) => {
      const id = `key:${k.key}`;
      const inProgress = k.status === 'in_progress';
      const lease = inProgress && k.locked_until
        ? `<span class="lease"><span class="pill ${k.lease_live ? 'pill-lease-live' : 'pill-lease-over'}" data-testid="lease" title="locked_until">${esc(t(k.lease_live ? 'tbl.leaseLive' : 'tbl.leaseOver'))}</span>${relativeCell(k.locked_until, now, 'lease')}</span>`
        : '';
      return `<tr data-testid="key-row" data-key="${esc(k.key)}" data-status="${esc(k.status)}" data-lease-live="${inProgress && k.lease_live ? 'true' : 'false'}"${rowClass(id)}>
        <td>${idChip(k.key)}${badge(id)}</td>
        <td class="wrap key-status"><span class="pill pill-${esc(k.status)}">${esc(k.status)}</span>${
          k.expired ? ` <span class="pill pill-expired" data-testid="key-expired">${esc(t('tbl.expired'))}</span>` : ''
        }${lease}</td>
        <td class="wrap"><code class="fp">${esc(k.fingerprint ?? '')}</code></td>
        <td class="num">${k.response_status ?? '<span class="null">null</span>'}</td>
        <td>${idChip(k.charge_id)}</td>
        <td class="time wrap" data-testid="expires-at">${relativeCell(k.expires_at, now, 'expiry')}</td></tr>`;
    })
    .join('');
  const keyColumns = ['key', 'status', 'fingerprint', 'response_status', 'charge_id', 'expires_at'];

  const unguarded = (state.unguarded_keys ?? [])
    .map((u, i) => {
      const id = `unguarded:${u.key}:${u.charge_id}`;
      return `<tr data-testid="unguarded-row" data-key="${esc(u.key)}" data-index="${i}"${rowClass(id)}>
        <td>${idChip(u.key)}${badge(id)}</td>
        <td>${idChip(u.charge_id)}</td>
        <td class="time">${esc(fmtTime(u.created_at))}</td></tr>`;
    })
    .join('');

  const refundRows = (state.refunds ?? [])
    .map(
      (r) => `<tr data-testid="refund-row" data-id="${esc(r.id)}"${rowClass(`refund:${r.id}`)}>
        <td>${idChip(r.id)}${badge(`refund:${r.id}`)}</td>
        <td>${idChip(r.charge_id)}</td>
        <td class="num">${esc(fmtAmount(r.amount, r.currency))}</td>
        <td class="time">${esc(fmtTime(r.created_at))}</td></tr>`,
    )
    .join('');

  // The network's ledger: the authorizations of this run, each with the
  // charge of ours that holds it, or none (an authorization nobody charged).
  const heldBy = new Map(state.charges.filter((c) => c.authorization_id).map((c) => [c.authorization_id, c.id]));
  const authorizations = network ? authorizationsSince(state, baseline) : [];
  const earlier = network ? (state.network?.authorizations?.length ?? 0) - authorizations.length : 0;
  const authRows = authorizations
    .map((a) => {
      const id = `auth:${a.id}`;
      const charge = heldBy.get(a.id) ?? null;
      return `<tr data-testid="auth-row" data-id="${esc(a.id)}" data-charge="${esc(charge ?? '')}"${rowClass(id)}>
        <td>${idChip(a.id)}${badge(id)}</td>
        <td class="num">${esc(fmtAmount(a.amount, a.currency))}</td>
        <td>${charge ? idChip(charge) : `<span class="pill pill-orphan" data-testid="orphan">${esc(t('tbl.noCharge'))}</span>`}</td>
        <td class="time">${esc(fmtTime(a.created_at))}</td></tr>`;
    })
    .join('');

  // Every scrolling table is a region a keyboard can reach; its name says
  // which table of which experiment it is, so no two regions share a name.
  const table = (title, testid, count, head, body) => `
    <div class="table-block" data-testid="${testid}">
      <p class="table-title"><code>${esc(title)}</code> <span class="count" data-testid="${testid}-count" data-count="${count}">${esc(t('tbl.count', { n: count }))}</span></p>
      ${
        count
          ? `<div class="table-scroll" tabindex="0" role="region" aria-label="${esc(context ? `${title} — ${context}` : title)}"><table>
              <thead><tr>${head.map((h) => `<th scope="col">${esc(t(`col.${h}`))}</th>`).join('')}</tr></thead>
              <tbody>${body}</tbody></table></div>`
          : `<p class="table-empty">${esc(t('tbl.empty'))}</p>`
      }
    </div>`;

  let networkBlock = '';
  if (network) {
    const ledger = state.network;
    const title = t('tbl.authorizations');
    const note = !ledger
      ? t('tbl.noNetwork')
      : ledger.error
        ? t('tbl.networkError', { message: ledger.error })
        : earlier > 0
          ? t('tbl.earlierAuthorizations', { n: earlier })
          : '';
    networkBlock = `<div class="network-ledger">
      <p class="ledger-title">${esc(t('tbl.networkLedger'))}</p>
      ${ledger && !ledger.error ? table(title, 'authorizations', authorizations.length, ['id', 'amount', 'held_by', 'created_at'], authRows) : ''}
      ${note ? `<p class="table-note" data-testid="network-note">${esc(note)}</p>` : ''}
    </div>`;
  }

  return `<div class="db-tables${compact ? ' compact' : ''}">
    ${network ? `<p class="ledger-title">${esc(t('tbl.ourLedger'))}</p>` : ''}
    ${table(t('tbl.charges'), 'charges', state.charges.length, ['id', 'amount', ...(showRefunded ? ['amount_refunded'] : []), ...(showStatus ? ['status'] : []), ...(network ? ['authorization_id'] : []), 'description', 'created_at'], charges)}
    ${refunds || state.refunds?.length ? table(t('tbl.refunds'), 'refunds', state.refunds?.length ?? 0, ['id', 'charge_id', 'amount', 'created_at'], refundRows) : ''}
    ${table(t('tbl.keys'), 'keys', state.idempotency_keys.length, keyColumns, keys)}
    ${state.unguarded_keys?.length ? table(t('tbl.unguarded'), 'unguarded', state.unguarded_keys.length, ['key', 'charge_id', 'created_at'], unguarded) : ''}
    ${networkBlock}
    ${locks ? renderLocks(state) : ''}
  </div>`;
}

// ---- what the database says waits (GET /demo/state's `locks`) ----------------------------

/**
 * The wait the database reports in `state`, or null: on PostgreSQL a demo
 * session waiting on a lock (wait_event_type 'Lock'), with the session it
 * waits for; on SQLite the write lock held (SQLite names no waiting
 * session: a writer waits for the lock in its busy handler).
 */
export function lockWaitOf(state) {
  const locks = state?.locks;
  if (!locks) return null;
  if (locks.backend === 'postgres') {
    const w = (locks.waiting ?? []).find((x) => x.wait_event_type === 'Lock');
    if (!w) return null;
    const by = w.blocked_by?.[0] ?? null;
    return {
      kind: 'postgres', pid: w.pid, event: w.wait_event ?? '', ms: w.waiting_ms ?? 0, query: w.query ?? '', by,
      mode: w.lock_mode ?? '', granted: w.granted ?? null, name: w.application_name ?? '', queryLength: w.query_length ?? null,
    };
  }
  if (locks.backend === 'sqlite') return locks.write_lock_held ? { kind: 'sqlite' } : null;
  return null;
}

/** One waiting session as a line of text. */
export function describeLockWait(w) {
  if (!w) return '';
  if (w.kind === 'sqlite') return t('locks.sqlite.held');
  // The sessions as psql shows them (application_name): lesson 4 names them for A and B.
  const who = sessionTag(w.name);
  const holder = sessionTag(w.by?.application_name);
  if (w.mode && who && holder) {
    return t('locks.pg.waitTagged', {
      who, holder, mode: w.mode, event: w.event, pid: w.pid, name: w.name, by: w.by.pid, byName: w.by.application_name,
      ms: fmtSpan(w.ms), state: w.by.state ?? '?', tx: fmtSpan(w.by.transaction_ms ?? 0),
    });
  }
  return t('locks.pg.wait', {
    pid: w.pid,
    event: w.event,
    ms: fmtSpan(w.ms),
    by: w.by?.pid ?? '?',
    state: w.by?.state ?? '?',
    tx: fmtSpan(w.by?.transaction_ms ?? 0),
  });
}

/** The request a demo session was named for (charges-demo-<account>-<tag>: lesson 4's A, B), or null. */
function sessionTag(name) {
  return /^charges-demo-\d+-([A-Za-z0-9]{1,8})$/.exec(name ?? '')?.[1] ?? null;
}

/** The statement a session runs, whole, or with an ellipsis and how much of it is shown. */
function statementHtml(x) {
  if (!x.query) return '';
  const cut = typeof x.query_length === 'number' && x.query_length > x.query.length;
  return `<code class="lock-query" data-testid="lock-query" data-whole="${!cut}">${esc(x.query)}${cut ? '…' : ''}</code>${
    cut ? ` <span class="fine">${esc(t('locks.queryCut', { shown: x.query.length, all: x.query_length }))}</span>` : ''}`;
}

/** The panel under the tables that shows what waits on what, as the database reports it now. */
export function renderLocks(state) {
  const locks = state?.locks;
  const title = `<p class="table-title">${esc(t('locks.title'))}</p>`;
  if (!locks) return `<div class="wait-panel" data-testid="wait-panel" data-backend="">${title}<p class="table-empty">${esc(t('locks.unknown'))}</p></div>`;
  const w = lockWaitOf(state);
  let body;
  if (locks.backend === 'sqlite') {
    body = `<p data-testid="lock-wait" data-write-lock="${Boolean(locks.write_lock_held)}">${esc(t(locks.write_lock_held ? 'locks.sqlite.held' : 'locks.sqlite.free'))}</p>`;
  } else if (locks.waiting?.length) {
    body = `<ul class="lock-list">${locks.waiting.map((x) => {
      const one = lockWaitOf({ locks: { backend: 'postgres', waiting: [x] } });
      const text = one ? describeLockWait(one) : t('locks.pg.other', { pid: x.pid, type: x.wait_event_type ?? '?', event: x.wait_event ?? '?' });
      const query = statementHtml(x);
      return `<li data-testid="lock-wait" data-wait-event-type="${esc(x.wait_event_type ?? '')}" data-blocked-by="${esc((x.blocked_by ?? []).map((b) => b.pid).join(' '))}">${esc(text)} ${query}</li>`;
    }).join('')}</ul>`;
  } else {
    body = `<p class="table-empty">${esc(t('locks.pg.none'))}</p>`;
  }
  return `<div class="wait-panel" data-testid="wait-panel" data-backend="${esc(locks.backend)}" data-waiting="${w ? 'true' : 'false'}"${
    w?.kind === 'postgres' ? ' data-wait-event-type="Lock"' : ''}${locks.backend === 'sqlite' ? ` data-write-lock="${Boolean(locks.write_lock_held)}"` : ''}>${title}${body}</div>`;
}

/** Every id in a state, for telling new rows from old ones. */
export function stateIds(state) {
  const ids = new Set();
  if (!state) return ids;
  for (const c of state.charges) ids.add(c.id);
  for (const k of state.idempotency_keys) ids.add(`key:${k.key}`);
  for (const u of state.unguarded_keys ?? []) ids.add(`unguarded:${u.key}:${u.charge_id}`);
  for (const r of state.refunds ?? []) ids.add(`refund:${r.id}`);
  for (const a of state.network?.authorizations ?? []) ids.add(`auth:${a.id}`);
  return ids;
}

/**
 * Under every table that is wider than its box (a phone), a line saying
 * that it scrolls sideways; none under one that fits. Call after drawing
 * tables, and when the width or the language changes.
 */
export function updateScrollHints(root = document) {
  for (const box of root.querySelectorAll('.table-scroll')) {
    let hint = box.nextElementSibling;
    if (!hint?.classList.contains('scroll-hint')) {
      hint = document.createElement('p');
      hint.className = 'scroll-hint';
      box.after(hint);
    }
    const wide = box.offsetParent !== null && box.scrollWidth > box.clientWidth + 1;
    hint.hidden = !wide;
    hint.textContent = wide ? t('tbl.scrollHint') : '';
  }
}
