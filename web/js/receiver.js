// Lesson 8's side of the database: the receiver the demo hosts for this
// tab's sandbox (GET /demo/lesson8/receiver), drawn as tables under the
// API's: every delivery attempt of this run's events (from the sender's
// webhook_attempts), the receiver's inbox and the payments it applied.
// Every figure is a row the server read; nothing is counted in the page.

import { t, escapeHtml as esc, fmtTime } from './i18n.js';
import { idChip } from './tables.js';
import { authHeaders } from './sandbox.js';

/** GET /demo/lesson8/receiver, as this tab's sandbox. */
export async function getReceiver() {
  const response = await fetch('/demo/lesson8/receiver', { headers: authHeaders(), cache: 'no-store' });
  if (!response.ok) throw new Error(`GET /demo/lesson8/receiver answered ${response.status}`);
  return response.json();
}

/** The run's event: the one whose object is the charge `chargeId`. */
export function eventOf(view, chargeId) {
  if (!view || !chargeId) return null;
  return (view.events ?? []).find((e) => {
    try {
      return JSON.parse(e.body).data.object.id === chargeId;
    } catch {
      return false;
    }
  }) ?? null;
}

/** The rows of `view` that belong to `event`: its attempts, its inbox row(s), its charge's payment. */
export function rowsOf(view, event, chargeId) {
  const id = event?.id ?? null;
  return {
    attempts: (view?.attempts ?? []).filter((a) => a.webhook_id === id),
    inbox: (view?.inbox ?? []).filter((r) => r.event_id === id),
    payment: (view?.payments ?? []).find((p) => p.charge_id === chargeId) ?? null,
  };
}

/** A signature header, shortened for a table: each `v1,` entry's first 10 characters. */
export function shortSignature(header) {
  if (!header) return '';
  return header.split(' ').map((entry) => (entry.length > 16 ? `${entry.slice(0, 13)}…` : entry)).join(' ');
}

/**
 * The receiver's tables, this run's rows only: the attempts and inbox rows
 * of its events (`runEvents`: their ids), the payments of its charges
 * (`runCharges`: their ids).
 */
export function renderReceiver(view, { runEvents = new Set(), runCharges = new Set(), context = '' } = {}) {
  if (!view) return '';
  const attempts = (view.attempts ?? []).filter((a) => runEvents.has(a.webhook_id));
  const inbox = (view.inbox ?? []).filter((r) => runEvents.has(r.event_id));
  const payments = (view.payments ?? []).filter((p) => runCharges.has(p.charge_id));
  const statusCell = (a) => {
    const s = a.response_status;
    const tone = s !== null && s >= 200 && s < 300 ? 'succeeded' : 'failed';
    return `<span class="pill pill-${tone}">${esc(s === null ? t('tbl.noAnswer') : String(s))}</span>`;
  };
  const attemptRows = attempts
    .map((a) => `<tr data-testid="attempt-row" data-webhook-id="${esc(a.webhook_id ?? '')}" data-attempt="${a.attempt}" data-timestamp="${a.webhook_timestamp}" data-status="${a.response_status ?? ''}" data-signature="${esc(a.webhook_signature ?? '')}">
        <td class="num">${a.attempt}</td>
        <td>${idChip(a.webhook_id)}</td>
        <td class="num"><code>${a.webhook_timestamp}</code></td>
        <td class="wrap"><code class="fp">${esc(shortSignature(a.webhook_signature))}</code></td>
        <td>${statusCell(a)}</td>
        <td class="time">${esc(fmtTime(a.attempted_at))}</td></tr>`)
    .join('');
  const inboxRows = inbox
    .map((r) => `<tr data-testid="inbox-row" data-event-id="${esc(r.event_id)}">
        <td>${idChip(r.event_id)}</td>
        <td class="time">${esc(fmtTime(r.received_at))}</td></tr>`)
    .join('');
  const paymentRows = payments
    .map((p) => `<tr data-testid="payment-row" data-charge-id="${esc(p.charge_id)}" data-times="${p.times_applied}">
        <td>${idChip(p.charge_id)}</td>
        <td class="num">${p.times_applied}</td>
        <td>${idChip(p.last_event_id)}</td></tr>`)
    .join('');
  const table = (title, testid, count, head, body) => `
    <div class="table-block" data-testid="${testid}">
      <p class="table-title"><code>${esc(title)}</code> <span class="count" data-testid="${testid}-count" data-count="${count}">${esc(t('tbl.count', { n: count }))}</span></p>
      ${count
        ? `<div class="table-scroll" tabindex="0" role="region" aria-label="${esc(context ? `${title} — ${context}` : title)}"><table>
            <thead><tr>${head.map((h) => `<th scope="col">${esc(t(`col.${h}`))}</th>`).join('')}</tr></thead>
            <tbody>${body}</tbody></table></div>`
        : `<p class="table-empty">${esc(t('tbl.empty'))}</p>`}
    </div>`;
  return `<div class="receiver-ledger" data-testid="receiver-ledger">
    <p class="ledger-title">${esc(t('tbl.senderLedger'))}</p>
    ${table('webhook_attempts', 'attempts', attempts.length, ['attempt', 'webhook_id', 'webhook_timestamp', 'webhook_signature', 'answer', 'attempted_at'], attemptRows)}
    <p class="ledger-title">${esc(t('tbl.receiverLedger'))}</p>
    ${table('webhook_inbox', 'inbox', inbox.length, ['event_id', 'received_at'], inboxRows)}
    ${table('demo_payments_applied', 'payments', payments.length, ['charge_id', 'times_applied', 'last_event_id'], paymentRows)}
  </div>`;
}
