// The lessons: what each experiment sends, and how the diagram tells what
// the server did with it.
//
// The server's inner steps (which rows it inserted, what it waited for) are
// not visible from the page. The diagram draws them from what the server is
// known to do for the request that was sent, and from the answer that came
// back (status, Idempotent-Replayed), never from guesses about timing.

import { chargeRequest, expireRequest, newKey } from './api.js';
import { L } from './diagram.js';
import { Experiment, amountOf, shortKeyOf } from './experiment.js';
import { t, fmtAmount, fmtMs, fmtDuration, onLangChange } from './i18n.js';

const LOST = '/problems/simulated-lost-response';
const REUSED = '/problems/idempotency-key-reused';

// ---- narration ----------------------------------------------------------------

/** The answer's arrow back to the client; closes the request's bar. */
function reply(d, rec, bar) {
  const tag = bar.tag;
  const ms = () => fmtMs(rec.elapsedMs);
  if (rec.error) {
    d.note(['client', 'api'], L('d.failed', { message: rec.error }), { tag });
  } else if (rec.problemType === LOST) {
    d.message('api', 'client', L('d.lost'), { tag, kind: 'lost', detail: [() => `${rec.status} ${rec.statusText} · ${ms()} ms`] });
  } else if (rec.status === 201 && rec.replayed) {
    d.message('api', 'client', L('d.replyReplayed', { ms }), { tag, kind: 'reply' });
  } else {
    const detail = rec.problemType ? [() => rec.problemType] : [];
    d.message('api', 'client', L('d.reply', { status: `${rec.status} ${rec.statusText}`, ms }), { tag, kind: 'reply', detail });
  }
  d.closeBar(bar);
}

/**
 * What the server did with one POST /charges, drawn once its answer is in.
 * `expired`: the key had been expired on purpose before this request.
 */
function narrateCharge(d, rec, bar, { expired = false } = {}) {
  const intent = rec.spec.intent;
  const tag = bar.tag;
  const key = intent.key ? shortKeyOf(intent.key) : null;
  const amount = amountOf(rec.spec);
  const charged = rec.status === 201 && !rec.replayed;
  const lost = rec.problemType === LOST;
  if (!rec.error) {
    if (intent.mode === 'check-then-insert') {
      if (charged || lost) {
        d.message('api', 'db', L('d.select', { key }), { tag });
        d.message('api', 'db', L('d.insertUnguarded', { amount }), { tag });
      }
    } else if (rec.status === 201 && rec.replayed) {
      d.message('api', 'db', L('d.insertKeyTaken', { key }), { tag });
      d.message('db', 'api', L('d.readStored'), { tag, kind: 'reply' });
    } else if (charged || lost) {
      if (key) {
        d.message('api', 'db', L(expired ? 'd.expiredIsNew' : 'd.insertKeyNew', { key }), { tag });
        d.message('api', 'db', L('d.chargeAndSave', { amount }), { tag });
      } else {
        d.message('api', 'db', L('d.insertCharge', { amount }), { tag });
      }
    } else if (rec.problemType === REUSED) {
      d.message('api', 'db', L('d.insertKeyTaken', { key }), { tag });
      d.message('db', 'api', L('d.fingerprintDiffers'), { tag, kind: 'reply' });
    }
  }
  reply(d, rec, bar);
}

function narrateExpire(d, rec, bar) {
  if (rec.status === 200) d.message('api', 'db', L('d.markExpired', { key: shortKeyOf(rec.spec.intent.key) }), { tag: bar.tag });
  reply(d, rec, bar);
}

// Card titles, as thunks so they follow a language switch.
const T = L;

// ---- lesson 1: retrying without a key -----------------------------------------------

const lesson1 = {
  id: 'l1',
  setup(ctx) {
    ctx.vars.body = { amount: 1000, currency: 'jpy', description: 'Lesson 1: a book' };
  },
  steps: [
    {
      label: 'l1.step1',
      run: (ctx) =>
        ctx.send(chargeRequest({ ...ctx.vars.body, faults: ['lose-response'] }), {
          tag: 'A',
          title: T('title.first'),
          narrate: narrateCharge,
        }),
    },
    {
      label: 'l1.step2',
      run: (ctx) => ctx.send(chargeRequest(ctx.vars.body), { tag: 'B', title: T('title.retryNoKey'), narrate: narrateCharge }),
    },
  ],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    return { ok: n === 2, key: 'l1.verdict', params: { n } };
  },
};

// ---- lesson 3: the idempotency key ------------------------------------------------------

const lesson3Retry = {
  id: 'l3-retry',
  setup(ctx) {
    ctx.vars.key = newKey();
    ctx.vars.body = { amount: 1000, currency: 'jpy', description: 'Lesson 3: a book' };
  },
  steps: [
    {
      label: 'l3.retry.step1',
      run: (ctx) =>
        ctx.send(chargeRequest({ ...ctx.vars.body, key: ctx.vars.key, faults: ['lose-response'] }), {
          tag: 'A',
          title: T('title.first'),
          narrate: narrateCharge,
        }),
    },
    {
      label: 'l3.retry.step2',
      run: (ctx) =>
        ctx.send(chargeRequest({ ...ctx.vars.body, key: ctx.vars.key }), {
          tag: 'B',
          title: T('title.retrySameKey'),
          narrate: narrateCharge,
        }),
    },
  ],
  verdict(ctx) {
    const fresh = ctx.newCharges();
    const b = ctx.records.B;
    const id = b.json?.id ?? '';
    const same = fresh.length === 1 && fresh[0].id === id;
    return {
      ok: fresh.length === 1 && b.status === 201 && b.replayed && same,
      key: 'l3.retry.verdict',
      params: { n: fresh.length, id: id.slice(0, 8), replayed: b.replayed, same },
    };
  },
};

/** Two requests with one key, sent at the same moment; narrated once both are back. */
async function sendPair(ctx, { mode }) {
  const key = ctx.vars.key;
  const spec = () => chargeRequest({ ...ctx.vars.body, key, mode });
  const a = ctx.start(spec(), { tag: 'A', title: T('title.concurrent') });
  const b = ctx.start(spec(), { tag: 'B', title: T('title.concurrent') });
  await Promise.all([a.answered, b.answered]);
  const d = ctx.diagram;
  const [ra, rb] = [a.record, b.record];
  const fresh = (r) => r.status === 201 && !r.replayed;
  if (mode === 'check-then-insert' && fresh(ra) && fresh(rb)) {
    const amount = amountOf(ra.spec);
    d.message('api', 'db', L('d.select', { key: shortKeyOf(key) }), { tag: 'A' });
    d.message('api', 'db', L('d.select', { key: shortKeyOf(key) }), { tag: 'B' });
    d.note(['api'], L('d.pause'));
    d.message('api', 'db', L('d.insertUnguarded', { amount }), { tag: 'A' });
    d.message('api', 'db', L('d.insertUnguarded', { amount }), { tag: 'B' });
    reply(d, ra, a.bar);
    reply(d, rb, b.bar);
  } else if (!mode && fresh(ra) !== fresh(rb) && ra.status === 201 && rb.status === 201) {
    const [win, lose] = fresh(ra) ? [a, b] : [b, a];
    d.message('api', 'db', L('d.insertKeyNew', { key: shortKeyOf(key) }), { tag: win.bar.tag });
    d.message('api', 'db', L('d.raceLoser', { key: shortKeyOf(key), other: win.bar.tag }), { tag: lose.bar.tag });
    d.message('api', 'db', L('d.chargeAndSave', { amount: amountOf(ra.spec) }), { tag: win.bar.tag });
    d.message('db', 'api', L('d.readStored'), { tag: lose.bar.tag, kind: 'reply' });
    reply(d, win.record, win.bar);
    reply(d, lose.record, lose.bar);
  } else {
    // Not what the lesson expects: tell each one's story on its own.
    narrateCharge(d, ra, a.bar);
    narrateCharge(d, rb, b.bar);
  }
  await Promise.all([a.done, b.done]);
}

const lesson3Naive = {
  id: 'l3-naive',
  setup(ctx) {
    ctx.vars.key = newKey();
    ctx.vars.body = { amount: 1000, currency: 'jpy', description: 'Lesson 3: check, then insert' };
  },
  steps: [{ label: 'l3.naive.step1', run: (ctx) => sendPair(ctx, { mode: 'check-then-insert' }) }],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    const rows = (ctx.latest?.unguarded_keys ?? []).filter((u) => u.key === ctx.vars.key).length;
    return { ok: n === 2 && rows === 2, key: 'l3.naive.verdict', params: { n, rows } };
  },
};

const lesson3Guarded = {
  id: 'l3-guarded',
  setup(ctx) {
    ctx.vars.key = newKey();
    ctx.vars.body = { amount: 1000, currency: 'jpy', description: 'Lesson 3: unique constraint' };
  },
  steps: [{ label: 'l3.guarded.step1', run: (ctx) => sendPair(ctx, { mode: null }) }],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    const { A, B } = ctx.records;
    const replays = [A, B].filter((r) => r.status === 201 && r.replayed).length;
    const sameId = A.json?.id && A.json.id === B.json?.id;
    return { ok: n === 1 && replays === 1 && Boolean(sameId), key: 'l3.guarded.verdict', params: { n, replays } };
  },
};

// ---- lesson 4: a retry while the first is still running -----------------------------------

const HOLD_MS = 5000;
const RETRY_AFTER_MS = 1000;

/**
 * Lesson 4 in the "atomic" mode: the key and the charge share one
 * transaction, so B's insert of the same key waits on the unique index until
 * A commits, then B replays A's stored response.
 */
async function runLesson4Atomic(ctx) {
  const d = ctx.diagram;
  const key = ctx.vars.key;
  const short = shortKeyOf(key);
  const body = ctx.vars.body;
  const a = ctx.start(chargeRequest({ ...body, key, faults: [`delay-commit=${HOLD_MS}`] }), { tag: 'A', title: T('title.firstHeld') });
  d.message('api', 'db', L('d.uncommitted', { key: short }), { tag: 'A' });
  d.note(['db'], L('d.holdOpen', { s: HOLD_MS / 1000 }), { tag: 'A' });
  await Promise.race([ctx.sleep(RETRY_AFTER_MS), a.answered]);
  const b = ctx.start(chargeRequest({ ...body, key }), { tag: 'B', title: T('title.retryWhileRunning') });
  d.message('api', 'db', L('d.mustWait', { key: short, other: 'A' }), { tag: 'B' });
  const wait = d.openBar('B', 'db', { kind: 'wait', record: b.record });

  let committedDrawn = false;
  const drawCommit = () => {
    if (committedDrawn) return;
    committedDrawn = true;
    d.message('api', 'db', L('d.commitNow'), { tag: 'A' });
  };
  const aDone = a.answered.then((rec) => {
    if (rec.status === 201 && !rec.replayed) drawCommit();
    reply(d, rec, a.bar);
  });
  const bDone = b.answered.then((rec) => {
    if (rec.status === 201 && rec.replayed) {
      drawCommit();
      d.closeBar(wait);
      d.message('db', 'api', L('d.unblocked', { other: 'A' }), { tag: 'B', kind: 'reply' });
    } else {
      d.closeBar(wait);
    }
    reply(d, rec, b.bar);
  });
  await Promise.all([aDone, bDone, a.done, b.done]);
}

function verdictLesson4Atomic(ctx) {
  const { A, B } = ctx.records;
  const n = ctx.newCharges().length;
  const ok = B.status === 201 && B.replayed && n === 1 && B.elapsedMs >= 3000 && A.json?.id === B.json?.id;
  return {
    ok,
    key: 'l4.verdict',
    params: { ms: fmtMs(B.elapsedMs), n, status: B.status, replayed: B.replayed },
  };
}

// ==== MODE SWITCH: lesson 4 ===================================================================
// Lesson 4 is written once per idempotency mode. Only "atomic" exists today.
// To add the "key-first" mode later (the key row is committed in its own
// transaction first, so an overlapping retry sees "in progress" and gets
// 409 /problems/idempotency-key-in-flight with Retry-After at once):
//   1. add `'key-first': { run: runLesson4KeyFirst, verdict: verdictLesson4KeyFirst }` below;
//   2. put the toggle in index.html where it says "MODE SWITCH: lesson 4";
//   3. let the toggle set `lesson4.mode` (the server reports its mode in
//      /demo/state as idempotency_mode).
// The SQLite backend needs no new mode here: only the wait differs (the
// whole database is locked, not one key), and state.backend names it.
const LESSON4_MODES = {
  atomic: { run: runLesson4Atomic, verdict: verdictLesson4Atomic },
};
// ===============================================================================================

const lesson4 = {
  id: 'l4',
  mode: 'atomic',
  setup(ctx) {
    ctx.vars.key = newKey();
    ctx.vars.body = { amount: 1000, currency: 'jpy', description: 'Lesson 4: a book' };
  },
  steps: [{ label: 'l4.step1', run: (ctx) => LESSON4_MODES[lesson4.mode].run(ctx) }],
  verdict: (ctx) => LESSON4_MODES[lesson4.mode].verdict(ctx),
};

// ---- lesson 5: key lifetime and reuse ---------------------------------------------------------

const lesson5Expire = {
  id: 'l5-expire',
  setup(ctx) {
    ctx.vars.key = newKey();
    ctx.vars.body = { amount: 1000, currency: 'jpy', description: 'Lesson 5: expiry' };
  },
  steps: [
    {
      label: 'l5.expire.step1',
      run: (ctx) =>
        ctx.send(chargeRequest({ ...ctx.vars.body, key: ctx.vars.key }), { tag: 'A', title: T('title.first'), narrate: narrateCharge }),
    },
    {
      label: 'l5.expire.step2',
      run: (ctx) => ctx.send(expireRequest(ctx.vars.key), { tag: 'B', title: T('title.expire'), narrate: narrateExpire }),
    },
    {
      label: 'l5.expire.step3',
      run: (ctx) =>
        ctx.send(chargeRequest({ ...ctx.vars.body, key: ctx.vars.key }), {
          tag: 'C',
          title: T('title.retryAfterExpiry'),
          narrate: (d, rec, bar) => narrateCharge(d, rec, bar, { expired: true }),
        }),
    },
  ],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    const c = ctx.records.C;
    return { ok: n === 2 && c.status === 201 && !c.replayed, key: 'l5.expire.verdict', params: { n, status: c.status } };
  },
};

const lesson5Reuse = {
  id: 'l5-reuse',
  setup(ctx) {
    ctx.vars.key = newKey();
  },
  steps: [
    {
      label: 'l5.reuse.step1',
      run: (ctx) =>
        ctx.send(chargeRequest({ amount: 1000, currency: 'jpy', description: 'Lesson 5: reuse', key: ctx.vars.key }), {
          tag: 'A',
          title: T('title.charge', { amount: () => fmtAmount(1000, 'jpy') }),
          narrate: narrateCharge,
        }),
    },
    {
      label: 'l5.reuse.step2',
      run: (ctx) =>
        ctx.send(chargeRequest({ amount: 2500, currency: 'jpy', description: 'Lesson 5: reuse', key: ctx.vars.key }), {
          tag: 'B',
          title: T('title.otherAmount'),
          narrate: narrateCharge,
        }),
    },
  ],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    const b = ctx.records.B;
    const type = b.problemType ?? '';
    return { ok: b.status === 422 && type === REUSED && n === 1, key: 'l5.reuse.verdict', params: { n, status: b.status, type } };
  },
};

const lesson5NewKey = {
  id: 'l5-newkey',
  setup(ctx) {
    ctx.vars.body = { amount: 1000, currency: 'jpy', description: 'Lesson 5: a new key per attempt' };
  },
  steps: [
    {
      label: 'l5.newkey.step1',
      run: (ctx) =>
        ctx.send(chargeRequest({ ...ctx.vars.body, key: newKey(), faults: ['lose-response'] }), {
          tag: 'A',
          title: T('title.key1'),
          narrate: narrateCharge,
        }),
    },
    {
      label: 'l5.newkey.step2',
      run: (ctx) =>
        ctx.send(chargeRequest({ ...ctx.vars.body, key: newKey() }), { tag: 'B', title: T('title.key2'), narrate: narrateCharge }),
    },
  ],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    return { ok: n === 2, key: 'l5.newkey.verdict', params: { n } };
  },
};

/** Every experiment, by the id of its placeholder in index.html (data-experiment). */
export const EXPERIMENTS = {
  l1: lesson1,
  'l3-retry': lesson3Retry,
  'l3-naive': lesson3Naive,
  'l3-guarded': lesson3Guarded,
  l4: lesson4,
  'l5-expire': lesson5Expire,
  'l5-reuse': lesson5Reuse,
  'l5-newkey': lesson5NewKey,
};

export function mountExperiments(root) {
  for (const host of root.querySelectorAll('[data-experiment]')) {
    const def = EXPERIMENTS[host.dataset.experiment];
    if (def) new Experiment(host, def);
  }
}

// ---- lesson 2: runs in the browser only ------------------------------------------------------

export function mountLesson2(root) {
  const widget = root.querySelector('[data-widget="balance"]');
  const model = { dec: [500], set: [500] };
  const ops = {
    dec: (v) => v - 100,
    set: () => 400,
  };
  const render = () => {
    for (const op of ['dec', 'set']) {
      const values = model[op];
      const track = widget.querySelector(`[data-track="${op}"]`);
      track.innerHTML = values
        .map((v, i) => `<li${i === values.length - 1 ? ' class="current"' : ''}><span class="v">${v}</span></li>`)
        .join('');
      const button = widget.querySelector(`[data-apply="${op}"]`);
      const done = values.length - 1;
      button.textContent = done >= 3 ? t('l2.applyDone') : t('l2.applyOnce', { done });
      button.disabled = done >= 3;
    }
    const done = Math.min(model.dec.length, model.set.length) - 1;
    widget.querySelector('[data-role="after"]').textContent = t('l2.after', {
      done: Math.max(model.dec.length, model.set.length) - 1,
      dec: model.dec.at(-1),
      set: model.set.at(-1),
    });
    widget.dataset.done = String(done);
  };
  for (const op of ['dec', 'set']) {
    widget.querySelector(`[data-apply="${op}"]`).addEventListener('click', () => {
      if (model[op].length < 4) model[op].push(ops[op](model[op].at(-1)));
      render();
    });
  }
  widget.querySelector('[data-role="start-over"]').addEventListener('click', () => {
    model.dec = [500];
    model.set = [500];
    render();
  });

  const del = root.querySelector('[data-widget="delete"]');
  const order = { exists: true, log: [] };
  const renderDelete = () => {
    del.querySelector('[data-role="order"]').textContent = order.exists ? t('l2.orderExists') : t('l2.orderGone');
    del.querySelector('[data-role="order"]').className = `order ${order.exists ? 'exists' : 'gone'}`;
    del.querySelector('[data-role="log"]').innerHTML = order.log
      .map((status) => `<li>${t('l2.deleteLine', { status })}</li>`)
      .join('');
    del.querySelector('[data-role="recreate"]').disabled = order.exists;
  };
  del.querySelector('[data-role="delete"]').addEventListener('click', () => {
    order.log.push(order.exists ? '204 No Content' : '404 Not Found');
    order.exists = false;
    renderDelete();
  });
  del.querySelector('[data-role="recreate"]').addEventListener('click', () => {
    order.exists = true;
    order.log = [];
    renderDelete();
  });

  render();
  renderDelete();
  onLangChange(() => {
    render();
    renderDelete();
  });
}

/** Lesson 4's and 5's sentences that quote the server's own settings. */
export function renderServerFacts(root, state) {
  const backendName = { postgresql: 'PostgreSQL', sqlite: 'SQLite' }[state?.backend] ?? state?.backend ?? '…';
  const mode = state?.idempotency_mode ?? '…';
  const l4 = root.querySelector('[data-role="l4-backend"]');
  if (l4) l4.textContent = t('l4.backend', { backend: backendName, mode });
  const l5 = root.querySelector('[data-role="l5-ttl"]');
  if (l5) l5.textContent = t('l5.p1', { ttl: state ? fmtDuration(state.idempotency_ttl_seconds) : '…' });
}
