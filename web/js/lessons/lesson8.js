// Lesson 8: the other direction.
//
// A charge writes its event (charge.succeeded) and one pending delivery in
// its own transaction; the server's sender then POSTs the event to the
// sandbox's endpoint, signed (Standard Webhooks), and retries until it gets
// a 2xx. The endpoint is a receiver the demo hosts for this sandbox
// (POST /demo/receivers/{id}), written as an integrator would write theirs:
// verify the signature, then record the event's id in the inbox and apply
// its effect in one transaction. The experiments make it lose its answers
// (the sender retries with the same webhook-id and a new timestamp and
// signature), switch its inbox off (a redelivery is applied twice), and
// send it a tampered body (refused, nothing recorded). Every figure is a
// row: GET /demo/lesson8/receiver, read with the tables after each step.

import { getState } from '../api.js';
import { L } from '../diagram.js';
import { amountOf, shortKeyOf } from '../experiment.js';
import { t, fmtAmount, fmtMs, fmtSpan } from '../i18n.js';
import { outcomeOf, EXECUTED } from '../outcome.js';
import { getReceiver, eventOf, rowsOf, renderReceiver, shortSignature } from '../receiver.js';
import { authHeaders } from '../sandbox.js';
import { charge, reply, T, experiment, setText } from './shared.js';

const LANES = ['client', 'api', 'db', 'receiver'];
/** While the sender works, the page reads the rows this often. */
const POLL_MS = 500;
/** How much longer than the whole retry schedule the page waits before it gives up. */
const SLACK_MS = 8000;

/** The tables, with the receiver's rows (GET /demo/state, then GET /demo/lesson8/receiver). */
async function readState() {
  const state = await getState();
  return { ...state, receiver: await getReceiver() };
}

/** A /demo/lesson8 call as this tab's sandbox, outside the lesson's cards (the lesson's setup). */
async function demoCall(method, path, body = null) {
  const headers = [...authHeaders()];
  if (body) headers.push(['Content-Type', 'application/json']);
  const response = await fetch(path, { method, headers, body: body ? JSON.stringify(body) : undefined, cache: 'no-store' });
  if (!response.ok) throw new Error(`${method} ${path} answered ${response.status}`);
  return response.json();
}

/** The sandbox's endpoint (made once) and the receiver's faults for this run; drawn as a note. */
async function prepare(ctx, { lose, inbox }) {
  const endpoint = await demoCall('POST', '/demo/lesson8/endpoint');
  await demoCall('PUT', '/demo/lesson8/faults', { lose_answers: lose, inbox });
  ctx.vars.faults = { lose, inbox };
  ctx.vars.receiverPath = new URL(endpoint.url).pathname;
  ctx.diagram.note(['receiver'], L(inbox ? 'd.l8setup' : 'd.l8setupNoInbox', { n: lose }));
}

/** The charge, drawn with its event and delivery row in the same transaction (the outbox). */
function narrateOutbox(d, rec, bar) {
  if (outcomeOf(rec) === EXECUTED) {
    d.message('api', 'db', L('d.l8outbox', { amount: amountOf(rec.spec) }), { tag: bar.tag });
  }
  reply(d, rec, bar);
}

/** Step 1 of each experiment: the setup, then one charge with a key. */
function chargeStep(label, faults) {
  return {
    label,
    run: async (ctx) => {
      await prepare(ctx, faults);
      const spec = charge({ ...ctx.vars.body, key: ctx.vars.key });
      const rec = await ctx.send(spec, { tag: 'A', title: T('title.l8charge', { amount: amountOf(spec) }), narrate: narrateOutbox });
      ctx.vars.chargeId = rec.json?.id ?? null;
    },
  };
}

/** One attempt, as the sender's row tells it, and what the receiver is known to do with it. */
function drawAttempt(d, a, { lose, inbox }) {
  const n = a.attempt;
  d.message('api', 'receiver', L('d.l8post', { n }), {
    detail: [
      () => `webhook-id: ${shortKeyOf(a.webhook_id ?? '')}`,
      () => `webhook-timestamp: ${a.webhook_timestamp}`,
      () => `webhook-signature: ${shortSignature(a.webhook_signature)}`,
    ],
  });
  const status = a.response_status;
  if (status === null) {
    d.message('receiver', 'api', L('d.l8noAnswer'), { kind: 'lost' });
    return;
  }
  const did = !inbox ? 'd.l8noInbox' : n === 1 ? 'd.l8first' : 'd.l8dup';
  d.note(['receiver'], L(did));
  if (status >= 200 && status < 300) d.message('receiver', 'api', L('d.l8answered', { status }), { kind: 'reply' });
  else d.message('receiver', 'api', L(n <= lose ? 'd.l8thrown' : 'd.l8failed', { status }), { kind: 'lost' });
}

/**
 * Step 2: the page reads the rows every POLL_MS while the server's sender
 * delivers the run's event, and draws each attempt as its row appears,
 * until the delivery is no longer pending (or the schedule is long over).
 */
async function watchDeliveries(ctx) {
  const d = ctx.diagram;
  const started = performance.now();
  let state = await ctx.refresh();
  const schedule = state.receiver?.retry_schedule_seconds ?? [];
  const limit = schedule.reduce((sum, s) => sum + s, 0) * 1100 + SLACK_MS;
  d.note(['api'], L('d.l8sender', { schedule: schedule.map((s) => `${s} s`).join(', ') }));
  let drawn = 0;
  for (;;) {
    const event = eventOf(state.receiver, ctx.vars.chargeId);
    const { attempts } = rowsOf(state.receiver, event, ctx.vars.chargeId);
    for (const a of attempts.slice(drawn)) drawAttempt(d, a, ctx.vars.faults);
    drawn = attempts.length;
    const waited = performance.now() - started;
    if ((event?.delivery && event.delivery.status !== 'pending') || waited > limit) break;
    const last = attempts.at(-1);
    ctx.progress(L('progress.l8', { n: attempts.length, status: last?.response_status ?? '—', waited: () => fmtSpan(waited) }), waited);
    await ctx.sleep(POLL_MS);
    state = await ctx.refresh();
  }
  const event = eventOf(state.receiver, ctx.vars.chargeId);
  const rows = rowsOf(state.receiver, event, ctx.vars.chargeId);
  ctx.vars.event = event;
  ctx.vars.rows = rows;
  if (!event?.delivery || event.delivery.status === 'pending') d.note(['api'], L('d.l8notDelivered', { span: () => fmtSpan(performance.now() - started) }));
}

const watchStep = (label) => ({ label, run: watchDeliveries });

/** What the run's rows say: its attempts (one webhook-id, new timestamps and signatures), inbox rows, payments applied. */
function summary(ctx) {
  const rows = ctx.vars.rows ?? { attempts: [], inbox: [], payment: null };
  const { attempts } = rows;
  const ids = new Set(attempts.map((a) => a.webhook_id));
  return {
    attempts,
    statuses: attempts.map((a) => a.response_status ?? '—').join(', ') || '—',
    oneId: attempts.length > 0 && ids.size === 1 && [...ids][0] === ctx.vars.event?.id,
    newEach: new Set(attempts.map((a) => a.webhook_timestamp)).size === attempts.length
      && new Set(attempts.map((a) => a.webhook_signature)).size === attempts.length,
    inbox: rows.inbox.length,
    times: rows.payment?.times_applied ?? 0,
    delivered: ctx.vars.event?.delivery?.status === 'succeeded',
  };
}

/** A lesson 8 experiment: four lanes, the receiver's rows under the tables, a count of what it recorded and applied. */
function receiverExperiment(def) {
  return experiment({
    lanes: LANES,
    readState,
    extraTables: (ctx) => renderReceiver(ctx.latest?.receiver, {
      runEvents: ctx.vars.event ? new Set([ctx.vars.event.id]) : eventIds(ctx),
      runCharges: new Set(ctx.vars.chargeId ? [ctx.vars.chargeId] : []),
      context: t('exp.dbContext', { name: def.id }),
    }),
    countNote: (ctx) => {
      const s = summary(ctx);
      return L('d.l8count', { inbox: s.inbox, times: s.times });
    },
    ...def,
  });
}

/** The ids of the run's events so far (before its delivery has been watched). */
function eventIds(ctx) {
  const event = eventOf(ctx.latest?.receiver, ctx.vars.chargeId);
  return new Set(event ? [event.id] : []);
}

/** (a) The receiver loses its first two answers; the inbox records the event once. */
export const lesson8Lost = receiverExperiment({
  id: 'l8-lost',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l8lost' },
  steps: [chargeStep('l8.lost.step1', { lose: 2, inbox: true }), watchStep('l8.lost.step2')],
  verdict(ctx) {
    const s = summary(ctx);
    const lost = s.attempts.slice(0, 2).every((a) => a.response_status === 500);
    const ok = outcomeOf(ctx.records.A) === EXECUTED && s.attempts.length === 3 && lost && s.oneId && s.newEach
      && s.delivered && s.inbox === 1 && s.times === 1;
    return { ok, key: 'l8.lost.verdict', params: { n: s.attempts.length, statuses: s.statuses, inbox: s.inbox, times: s.times, id: shortKeyOf(ctx.vars.event?.id ?? '—') } };
  },
});

/** (b) The same with the inbox off: the redelivery is applied again. */
export const lesson8NoInbox = receiverExperiment({
  id: 'l8-noinbox',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l8noinbox' },
  tone: 'bad',
  steps: [chargeStep('l8.noinbox.step1', { lose: 1, inbox: false }), watchStep('l8.noinbox.step2')],
  verdict(ctx) {
    const s = summary(ctx);
    const ok = outcomeOf(ctx.records.A) === EXECUTED && s.attempts.length === 2 && s.oneId && s.delivered && s.inbox === 0 && s.times === 2;
    return { ok, key: 'l8.noinbox.verdict', params: { n: s.attempts.length, statuses: s.statuses, inbox: s.inbox, times: s.times, amount: () => fmtAmount(1000, 'jpy') } };
  },
});

/** The delivery the sender made, sent again by the page: its headers, and `body` (tampered or not). */
function webhookRequest(ctx, body) {
  const a = ctx.vars.rows?.attempts.at(-1) ?? {};
  return {
    kind: 'webhook',
    method: 'POST',
    path: ctx.vars.receiverPath,
    headers: [
      ['Content-Type', 'application/json'],
      ['Webhook-Id', a.webhook_id ?? ''],
      ['Webhook-Timestamp', String(a.webhook_timestamp ?? '')],
      ['Webhook-Signature', a.webhook_signature ?? ''],
    ],
    body,
    intent: {},
  };
}

/** The event's body as sent, with the charge's amount made 100 times larger. */
function tampered(body) {
  const changed = body.replace(/"amount":\s*(\d+)/, (_, n) => `"amount":${Number(n) * 100}`);
  return changed !== body ? changed : body.replace('}', ' }');
}

/** The page's own POST to the receiver, drawn from the client to the receiver. */
function sendToReceiver(ctx, { tag, title, body, expect }) {
  const spec = webhookRequest(ctx, body);
  return ctx.send(spec, {
    tag,
    title: T(title),
    to: 'receiver',
    detail: [() => `webhook-id: ${shortKeyOf(spec.headers[1][1])}`, () => `webhook-signature: ${shortSignature(spec.headers[3][1])}`],
    explain: (r) => t(r.status === 400 ? 'card.explain.l8refused' : r.status === 200 ? 'card.explain.l8duplicate' : 'card.explain.other', { status: `${r.status} ${r.statusText}` }),
    narrate: (d, rec, bar) => {
      d.note(['receiver'], L(expect), { tag });
      const detail = rec.problemType ? [() => rec.problemType] : [() => `"received": "${rec.json?.received ?? '?'}"`];
      d.message('receiver', 'client', L('d.reply', { status: `${rec.status} ${rec.statusText}`, ms: () => fmtMs(rec.elapsedMs) }), { tag, kind: 'reply', detail });
      d.closeBar(bar);
    },
  });
}

/** (c) A tampered body fails the signature check; the untouched one verifies and is a duplicate. */
export const lesson8Tampered = receiverExperiment({
  id: 'l8-tampered',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l8tampered' },
  steps: [
    {
      label: 'l8.tampered.step1',
      run: async (ctx) => {
        await chargeStep('', { lose: 0, inbox: true }).run(ctx);
        await watchDeliveries(ctx);
        ctx.vars.before = summary(ctx);
      },
    },
    {
      label: 'l8.tampered.step2',
      run: async (ctx) => {
        await sendToReceiver(ctx, { tag: 'B', title: 'title.l8tampered', body: tampered(ctx.vars.event?.body ?? '{}'), expect: 'd.l8refused' });
        ctx.vars.rows = rowsOf(ctx.latest?.receiver, ctx.vars.event, ctx.vars.chargeId);
        ctx.vars.afterB = summary(ctx);
      },
    },
    {
      label: 'l8.tampered.step3',
      run: async (ctx) => {
        await sendToReceiver(ctx, { tag: 'C', title: 'title.l8untouched', body: ctx.vars.event?.body ?? '{}', expect: 'd.l8dupPost' });
        ctx.vars.rows = rowsOf(ctx.latest?.receiver, ctx.vars.event, ctx.vars.chargeId);
      },
    },
  ],
  verdict(ctx) {
    const { B, C } = ctx.records;
    const before = ctx.vars.before ?? {};
    const afterB = ctx.vars.afterB ?? {};
    const s = summary(ctx);
    const refused = B?.status === 400 && /webhook-not-verified$/.test(B?.problemType ?? '');
    const ok = before.delivered === true && before.inbox === 1 && before.times === 1 && refused
      && afterB.inbox === 1 && afterB.times === 1 && C?.status === 200 && C?.json?.received === 'duplicate' && s.inbox === 1 && s.times === 1;
    return { ok, key: 'l8.tampered.verdict', params: { b: B?.status ?? '—', c: C?.status ?? '—', received: C?.json?.received ?? '—', inbox: s.inbox, times: s.times } };
  },
});

/** Lesson 8's sentence that quotes the server: the retry schedule of its sender (the demo's short one). */
export function renderLesson8(root, config) {
  const el = root.querySelector('[data-role="l8-schedule"]');
  if (!el) return;
  const schedule = config?.webhook_retry_schedule_seconds;
  setText(el, t('l8.schedule', { schedule: schedule ? schedule.map((s) => `${s} s`).join(', ') : '…' }));
}
