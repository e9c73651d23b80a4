// Lesson 7: the charge reaches the card network.
//
// Every charge is first authorized at the card network, a service of its own
// with its own database, under an Idempotency-Key the server derives from
// the client's (the same account and key always give the same one). The
// experiments draw a fourth lane for it and show both ledgers after each
// step: our charges, with the authorization each holds, and the network's
// authorizations of this run (GET /demo/state's `network`).

import { L } from '../diagram.js';
import { amountOf, shortKeyOf } from '../experiment.js';
import { t, tHtml, fmtAmount, fmtSpan } from '../i18n.js';
import { outcomeOf, EXECUTED, REPLAYED, IN_FLIGHT, LOST, UNAVAILABLE } from '../outcome.js';
import { server, serverOrNull } from '../server.js';
import { timeOf, nowOf } from '../tables.js';
import { charge, reply, T, experiment, showLease, setHtml } from './shared.js';

const NETWORK_LANES = ['client', 'api', 'db', 'network'];

/** Key-first's lease in lesson 7 (c): long enough for B to meet it, short enough to wait out. */
const L7_LEASE_MS = 2000;
/** B is sent this long after A's answer. */
const L7_RETRY_AFTER_MS = 300;
/** While waiting for the recovery task, the page reads the tables this often. */
const L7_POLL_MS = 300;
/** How much longer than the lease and one recovery interval the page waits before it gives up. */
const L7_RECOVERY_SLACK_MS = 5000;

/** The lesson's experiments need a server with a card network (GET /demo/config's `network`). */
function withoutNetwork() {
  const config = serverOrNull();
  return config && !config.network ? t('l7.noNetwork') : null;
}

/** A lesson 7 experiment: four lanes, both ledgers, and off on a server without a network. */
function networkExperiment(def) {
  return experiment({ lanes: NETWORK_LANES, network: true, unavailable: withoutNetwork, ...def });
}

/** The authorization ids the network's ledger holds in `state`. */
function authIdsOf(state) {
  return new Set((state?.network?.authorizations ?? []).map((a) => a.id));
}

/** Our charges, the network's authorizations (this run's) and the key row, as they are now. */
function ledgersOf(ctx) {
  return {
    charges: ctx.newCharges().length,
    auths: ctx.newAuthorizations().length,
    key: ctx.latest?.idempotency_keys.find((k) => k.key === ctx.vars.key) ?? null,
  };
}

/** The network's key for a request: derived from the client's, or (network-fresh-key) a new one each time. */
function networkKeyLine(intent) {
  const fresh = intent.faults?.includes('network-fresh-key');
  return L(fresh ? 'd.netKeyFresh' : 'd.netKeyDerived', { key: shortKeyOf(intent.key ?? '') });
}

// A charge that calls the card network runs in three phases: the design
// this lesson teaches (the diagrams draw it from these definitions).
//  1. one short transaction: register the key in_progress under its lease,
//     with the request; COMMIT; the connection goes back to the pool;
//  2. the call to the network under the derived key, holding no database
//     connection and no transaction;
//  3. one transaction: the charge with its authorization id, and the 201
//     under the key only if the lease is still ours; COMMIT.
// A foreign call never runs inside a transaction: the connection would sit
// idle in it while the network thinks, and every other request queue behind.

/** Phase 1, drawn: the key committed in progress, the connection handed back. */
function drawPhase1(d, tag, key) {
  d.message('api', 'db', L('d.phase1', { key }), { tag });
  d.note(['db'], L('d.poolBack'), { tag });
}

/** Phase 2, drawn: the call to the network, with no connection held. */
function drawPhase2(d, tag, intent, kind = 'call') {
  d.message('api', 'network', L('d.callAuthorize'), { tag, kind, detail: [L('d.phase2'), networkKeyLine(intent)] });
}

/**
 * What the server did with one POST /charges that goes through the card
 * network, drawn once its answer is in. `known`: the authorization ids the
 * network held before the request was sent (an id among them is the
 * network's replay, not a new authorization).
 */
function narrateNetworkCharge(d, rec, bar, { known = new Set(), holder = '…' } = {}) {
  const intent = rec.spec.intent;
  const tag = bar.tag;
  const key = shortKeyOf(intent.key ?? '');
  const faults = intent.faults ?? [];
  const amount = amountOf(rec.spec);
  const outcome = outcomeOf(rec);
  const toDb = (text) => d.message('api', 'db', text, { tag });
  const fromDb = (text) => d.message('db', 'api', text, { tag, kind: 'reply' });
  if (outcome === REPLAYED) {
    // Our key row answers: the network is not asked again.
    toDb(L('d.readKey', { key }));
    fromDb(L('d.readStoredNoNetwork'));
  } else if (outcome === IN_FLIGHT) {
    toDb(L('d.kfRegisterB', { key }));
    fromDb(L('d.kfInProgress', { other: holder }));
  } else if (outcome === EXECUTED) {
    const auth = rec.json?.authorization_id ?? '';
    drawPhase1(d, tag, key);
    drawPhase2(d, tag, intent);
    d.message('network', 'api', L(known.has(auth) ? 'd.netReplayed' : 'd.netAuthorized', { id: shortKeyOf(auth) }), { tag, kind: 'reply' });
    toDb(L('d.phase3', { amount, id: shortKeyOf(auth) }));
  } else if (outcome === UNAVAILABLE) {
    drawPhase1(d, tag, key);
    if (faults.includes('network-down')) {
      drawPhase2(d, tag, intent, 'lost');
      d.note(['network'], L('d.netDown'), { tag });
    } else {
      drawPhase2(d, tag, intent);
      d.note(['network'], L('d.netAuthorizes'), { tag });
      d.message('network', 'api', L('d.netAnswerLost'), { tag, kind: 'lost' });
    }
    toDb(L('d.phase3Release'));
  } else if (outcome === LOST && faults.includes('abandon-after-network')) {
    drawPhase1(d, tag, key);
    drawPhase2(d, tag, intent);
    d.message('network', 'api', L('d.netAuthorizedNew'), { tag, kind: 'reply' });
    d.note(['api'], L('d.abandonedAfterNetwork'), { tag });
  }
  reply(d, rec, bar);
}

/** A charge with the run's key, through the network, narrated with the network's lane. */
function sendNetworkCharge(ctx, { tag, title, faults = [], mode, harm = null, holder }) {
  const known = authIdsOf(ctx.latest);
  // Every charge of this lesson asks for the card network (Demo-Network: on); lessons 1 to 6 do not.
  const spec = charge({ ...ctx.vars.body, key: ctx.vars.key, faults, mode, network: true });
  return ctx.send(spec, {
    tag,
    title: T(title, { s: L7_LEASE_MS / 1000 }),
    harm,
    narrate: (d, rec, bar) => narrateNetworkCharge(d, rec, bar, { known, holder }),
  });
}

/** The first attempt of (a), (b) and (d): one charge with a fault at the network; both ledgers after it. */
function l7FirstStep(label, faults) {
  return {
    label,
    run: async (ctx) => {
      await sendNetworkCharge(ctx, { tag: 'A', title: 'title.first', faults });
      ctx.vars.afterA = ledgersOf(ctx);
    },
  };
}

/** The retry of (a), (b) and (d), with the same key. */
function l7RetryStep(label, { faults = [], harm = null } = {}) {
  return { label, run: (ctx) => sendNetworkCharge(ctx, { tag: 'B', title: 'title.retrySameKey', faults, harm }) };
}

/** The charge the retry B made, and the authorizations of the run that no charge of ours holds. */
function l7Outcome(ctx) {
  const charges = ctx.newCharges();
  const auths = ctx.newAuthorizations();
  const held = new Set((ctx.latest?.charges ?? []).map((c) => c.authorization_id).filter(Boolean));
  const b = ctx.records.B;
  const charged = charges.find((c) => c.id === b?.json?.id) ?? null;
  return {
    charges,
    auths,
    orphans: auths.filter((a) => !held.has(a.id)),
    authId: b?.json?.authorization_id ?? null,
    charged,
  };
}

/** (a) The network authorized, its answer was lost; our retry with the same key is the network's replay. */
export const lesson7Lost = networkExperiment({
  id: 'l7-lost',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l7lost' },
  steps: [l7FirstStep('l7.lost.step1', ['network-lose-answer']), l7RetryStep('l7.lost.step2')],
  verdict(ctx) {
    const { A, B } = ctx.records;
    const afterA = ctx.vars.afterA ?? {};
    const { charges, auths, authId, charged } = l7Outcome(ctx);
    const same = Boolean(authId) && auths.length === 1 && auths[0].id === authId && charged?.authorization_id === authId;
    const ok = outcomeOf(A) === UNAVAILABLE && afterA.charges === 0 && afterA.auths === 1 && !afterA.key
      && outcomeOf(B) === EXECUTED && charges.length === 1 && same;
    return {
      ok,
      key: 'l7.lost.verdict',
      params: { a: A?.status ?? '—', b: B?.status ?? '—', n: charges.length, auths: auths.length, id: (authId ?? '—').slice(0, 8), same, authsA: afterA.auths ?? '—' },
    };
  },
});

/** (b) The same, but the key is not passed on: a new network key each time. */
export const lesson7Fresh = networkExperiment({
  id: 'l7-fresh',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l7fresh' },
  tone: 'bad',
  steps: [
    l7FirstStep('l7.fresh.step1', ['network-fresh-key', 'network-lose-answer']),
    l7RetryStep('l7.fresh.step2', { faults: ['network-fresh-key'], harm: 'orphan' }),
  ],
  verdict(ctx) {
    const { A, B } = ctx.records;
    const { charges, auths, orphans, authId, charged } = l7Outcome(ctx);
    const ok = outcomeOf(A) === UNAVAILABLE && outcomeOf(B) === EXECUTED && charges.length === 1 && auths.length === 2
      && orphans.length === 1 && charged?.authorization_id === authId && orphans[0].id !== authId;
    return {
      ok,
      key: 'l7.fresh.verdict',
      params: { n: charges.length, auths: auths.length, orphans: orphans.length, orphan: (orphans[0]?.id ?? '—').slice(0, 8), amount: () => fmtAmount(1000, 'jpy') },
    };
  },
});

/** (c) Key-first, abandoned after the network authorized; the server's recovery task finishes it. */
export const lesson7Recover = networkExperiment({
  id: 'l7-recover',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l7recover' },
  steps: [
    {
      label: L('l7.recover.step1', { s: L7_LEASE_MS / 1000 }),
      run: async (ctx) => {
        const mode = 'key-first';
        await sendNetworkCharge(ctx, { tag: 'A', title: 'title.abandonedAfterNetwork', mode, faults: ['abandon-after-network', `lease=${L7_LEASE_MS}`] });
        ctx.vars.afterA = ledgersOf(ctx);
        ctx.vars.authsAfterA = authIdsOf(ctx.latest);
        await ctx.sleep(L7_RETRY_AFTER_MS);
        await sendNetworkCharge(ctx, { tag: 'B', title: 'title.retryAtOnce', mode, holder: 'A' });
        ctx.vars.afterB = ledgersOf(ctx);
      },
    },
    { label: 'l7.recover.step2', run: (ctx) => waitForRecovery(ctx) },
    {
      label: 'l7.recover.step3',
      run: (ctx) => sendNetworkCharge(ctx, { tag: 'C', title: 'title.afterRecovery', mode: 'key-first' }),
    },
  ],
  verdict(ctx) {
    const { A, B, C } = ctx.records;
    const afterA = ctx.vars.afterA ?? {};
    const recovered = ctx.vars.recovered ?? {};
    const charges = ctx.newCharges();
    const auths = ctx.newAuthorizations();
    const charged = charges[0] ?? null;
    const same = charges.length === 1 && auths.length === 1 && charged.authorization_id === auths[0].id;
    const ok = outcomeOf(A) === LOST && afterA.key?.status === 'in_progress' && afterA.charges === 0 && afterA.auths === 1
      && outcomeOf(B) === IN_FLIGHT && recovered.ok === true && outcomeOf(C) === REPLAYED && C.json?.id === charged?.id
      && C.json?.id === recovered.chargeId && same;
    return {
      ok,
      key: 'l7.recover.verdict',
      params: {
        a: A?.status ?? '—',
        row: afterA.key?.status ?? '—',
        b: B?.status ?? '—',
        c: C?.status ?? '—',
        replayed: C?.replayed ?? false,
        recovered: recovered.ok === true,
        waited: () => fmtSpan(recovered.waitedMs ?? 0),
        n: charges.length,
        auths: auths.length,
        id: (auths[0]?.id ?? '—').slice(0, 8),
        same,
      },
    };
  },
});

/**
 * (c), step 2: the client waits while the lease runs out and the server's
 * recovery task (every recovery_interval_ms) takes the key over and
 * finishes A. The page reads the tables every L7_POLL_MS until the key row
 * is completed, or gives up after the lease, one interval and some slack.
 */
async function waitForRecovery(ctx) {
  const d = ctx.diagram;
  const key = ctx.vars.key;
  const short = shortKeyOf(key);
  const interval = server().recovery_interval_ms;
  const rowOf = (state) => state?.idempotency_keys.find((k) => k.key === key) ?? null;
  const started = performance.now();
  // The tables as they are now (the lease may be over, the key finished, already).
  let state = await ctx.refresh();
  const row = rowOf(state);
  // How long the lease still runs, by the server's clock; never longer than the lease A asked for.
  const left = row?.status === 'in_progress' && row.locked_until ? Math.max(0, timeOf(row.locked_until) - nowOf(state)) : 0;
  const limit = Math.min(L7_LEASE_MS, left) + interval + L7_RECOVERY_SLACK_MS;
  d.note(['client'], L('d.waitRecovery', { every: () => fmtSpan(L7_POLL_MS) }));
  showLease(ctx, state, key, started, { recoveryEvery: interval });
  while (rowOf(state)?.status !== 'completed' && performance.now() - started < limit) {
    await ctx.sleep(L7_POLL_MS);
    state = await ctx.refresh();
    showLease(ctx, state, key, started, { recoveryEvery: interval });
  }
  const waitedMs = Math.round(performance.now() - started);
  const done = rowOf(state);
  const charged = done?.status === 'completed' ? ctx.newCharges().find((c) => c.id === done.charge_id) ?? null : null;
  ctx.vars.recovered = { ok: Boolean(charged), chargeId: charged?.id ?? null, waitedMs };
  if (!charged) {
    d.note(['api'], L('d.notRecovered', { span: () => fmtSpan(waitedMs) }));
    return;
  }
  // What the tables show the recovery task did: the key completed, a charge holding the authorization A got.
  const auth = charged.authorization_id ?? '';
  d.note(['api'], L('d.recoveryTakesOver', { key: short, span: () => fmtSpan(waitedMs), every: () => fmtSpan(interval) }));
  d.message('api', 'network', L('d.callAuthorize'), { detail: [L('d.phase2'), L('d.netKeyDerived', { key: short })] });
  d.message('network', 'api', L(ctx.vars.authsAfterA?.has(auth) ? 'd.netReplayed' : 'd.netAuthorized', { id: shortKeyOf(auth) }), { kind: 'reply' });
  d.message('api', 'db', L('d.phase3', { amount: () => fmtAmount(charged.amount, charged.currency), id: shortKeyOf(auth) }));
}

/** (d) The network is down: 503 with Retry-After, nothing stored anywhere, the key free; the retry charges. */
export const lesson7Down = networkExperiment({
  id: 'l7-down',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l7down' },
  steps: [l7FirstStep('l7.down.step1', ['network-down']), l7RetryStep('l7.down.step2')],
  verdict(ctx) {
    const { A, B } = ctx.records;
    const afterA = ctx.vars.afterA ?? {};
    const { charges, auths, authId, charged } = l7Outcome(ctx);
    const retryAfter = A?.header('Retry-After') ?? null;
    const ok = outcomeOf(A) === UNAVAILABLE && retryAfter !== null && afterA.charges === 0 && afterA.auths === 0 && !afterA.key
      && outcomeOf(B) === EXECUTED && charges.length === 1 && auths.length === 1 && auths[0].id === authId && charged?.authorization_id === authId;
    return {
      ok,
      key: 'l7.down.verdict',
      params: { a: A?.status ?? '—', retryAfter: retryAfter ?? '—', b: B?.status ?? '—', n: charges.length, auths: auths.length, authsA: afterA.auths ?? '—' },
    };
  },
});

/** Lesson 7's sentences that quote the server: its network (or that it has none), the recovery task's interval. */
export function renderLesson7(root, config) {
  const network = config ? config.network : undefined;
  setHtml(root.querySelector('[data-role="l7-network"]'), network === null
    ? tHtml('l7.network.none.html')
    : tHtml('l7.network.html', { network: network ?? '…' }));
  const every = config ? fmtSpan(config.recovery_interval_ms) : '…';
  setHtml(root.querySelector('[data-role="l7-recover-intro"]'), tHtml('l7.recover.p1.html', {
    s: L7_LEASE_MS / 1000,
    ms: L7_LEASE_MS,
    every,
  }));
}
