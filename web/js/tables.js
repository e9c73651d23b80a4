// Drawing the database state (GET /demo/state) as tables.

import { t, escapeHtml as esc, fmtAmount, fmtTime } from './i18n.js';

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

/** One-line summary, e.g. "2 charges, 1 key". */
export function summarize(state) {
  if (!state) return '';
  let s = t('summary.db', { charges: state.charges.length, keys: state.idempotency_keys.length });
  if (state.unguarded_keys?.length) s += t('summary.unguarded', { n: state.unguarded_keys.length });
  return s;
}

/**
 * The tables of `state` as HTML. Rows whose id is not in `baseline` (a Set
 * of charge ids, keys and unguarded row ids seen when the run started) are
 * marked new.
 */
export function renderState(state, { baseline = null, compact = false } = {}) {
  const isNew = (id) => baseline !== null && !baseline.has(id);
  const badge = (id) => (isNew(id) ? ` <span class="badge-new">${esc(t('tbl.new'))}</span>` : '');
  const rowClass = (id) => (isNew(id) ? ' class="is-new"' : '');

  const charges = state.charges
    .map(
      (c) => `<tr data-testid="charge-row" data-id="${esc(c.id)}"${rowClass(c.id)}>
        <td>${idChip(c.id)}${badge(c.id)}</td>
        <td class="num">${esc(fmtAmount(c.amount, c.currency))}</td>
        <td class="desc">${esc(c.description ?? '')}</td>
        <td class="time">${esc(fmtTime(c.created_at))}</td></tr>`,
    )
    .join('');

  // The lease (key-first) only means something while a row is in progress, so
  // its column is shown only when the snapshot holds such a row.
  const showLease = state.idempotency_keys.some((k) => k.status === 'in_progress');
  const keys = state.idempotency_keys
    .map((k) => {
      const id = `key:${k.key}`;
      const inProgress = k.status === 'in_progress';
      const lease = inProgress && k.locked_until
        ? `${esc(fmtTime(k.locked_until))}<br><span class="pill ${k.lease_live ? 'pill-lease-live' : 'pill-lease-over'}" data-testid="lease">${esc(t(k.lease_live ? 'tbl.leaseLive' : 'tbl.leaseOver'))}</span>`
        : '<span class="null">—</span>';
      return `<tr data-testid="key-row" data-key="${esc(k.key)}" data-status="${esc(k.status)}" data-lease-live="${inProgress && k.lease_live ? 'true' : 'false'}"${rowClass(id)}>
        <td>${idChip(k.key)}${badge(id)}</td>
        <td><span class="pill pill-${esc(k.status)}">${esc(k.status)}</span>${
          k.expired ? ` <span class="pill pill-expired" data-testid="key-expired">${esc(t('tbl.expired'))}</span>` : ''
        }</td>
        ${showLease ? `<td class="time">${lease}</td>` : ''}
        <td><code class="fp">${esc(k.fingerprint ?? '')}</code></td>
        <td class="num">${k.response_status ?? '<span class="null">null</span>'}</td>
        <td>${idChip(k.charge_id)}</td>
        <td class="time">${esc(fmtTime(k.expires_at))}</td></tr>`;
    })
    .join('');
  const keyColumns = ['key', 'status', ...(showLease ? ['locked_until'] : []), 'fingerprint', 'response_status', 'charge_id', 'expires_at'];

  const unguarded = (state.unguarded_keys ?? [])
    .map((u, i) => {
      const id = `unguarded:${u.key}:${u.charge_id}`;
      return `<tr data-testid="unguarded-row" data-key="${esc(u.key)}" data-index="${i}"${rowClass(id)}>
        <td>${idChip(u.key)}${badge(id)}</td>
        <td>${idChip(u.charge_id)}</td>
        <td class="time">${esc(fmtTime(u.created_at))}</td></tr>`;
    })
    .join('');

  const table = (title, testid, count, head, body) => `
    <div class="table-block" data-testid="${testid}">
      <h5><code>${esc(title)}</code> <span class="count" data-testid="${testid}-count" data-count="${count}">${esc(t('tbl.count', { n: count }))}</span></h5>
      ${
        count
          ? `<div class="table-scroll" tabindex="0" role="region" aria-label="${esc(title)}"><table>
              <thead><tr>${head.map((h) => `<th scope="col">${esc(t(`col.${h}`))}</th>`).join('')}</tr></thead>
              <tbody>${body}</tbody></table></div>`
          : `<p class="table-empty">${esc(t('tbl.empty'))}</p>`
      }
    </div>`;

  return `<div class="db-tables${compact ? ' compact' : ''}">
    ${table(t('tbl.charges'), 'charges', state.charges.length, ['id', 'amount', 'description', 'created_at'], charges)}
    ${table(t('tbl.keys'), 'keys', state.idempotency_keys.length, keyColumns, keys)}
    ${state.unguarded_keys?.length ? table(t('tbl.unguarded'), 'unguarded', state.unguarded_keys.length, ['key', 'charge_id', 'created_at'], unguarded) : ''}
  </div>`;
}

/** Every id in a state, for telling new rows from old ones. */
export function stateIds(state) {
  const ids = new Set();
  if (!state) return ids;
  for (const c of state.charges) ids.add(c.id);
  for (const k of state.idempotency_keys) ids.add(`key:${k.key}`);
  for (const u of state.unguarded_keys ?? []) ids.add(`unguarded:${u.key}:${u.charge_id}`);
  return ids;
}
