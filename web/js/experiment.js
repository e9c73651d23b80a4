// The frame every experiment shares: numbered step buttons, the live
// sequence diagram, one card per request (raw request, raw response, time,
// the database right after it), the database panel and the result.
//
// A lesson only says what its steps do (see lessons/, where most steps are
// rows of data). Steps run in order;
// while one experiment runs, the others wait, so the tables always belong to
// the experiment you are looking at.

import { t, tHtml, escapeHtml as esc, fmtAmount, fmtMs, msUnit, fmtTime, sentenceGap } from './i18n.js';
import { startRequest, getState, REASONS, declines } from './api.js';
import { SequenceDiagram, L, tagColor } from './diagram.js';
import { renderState, stateIds, summarize, hue, authorizationsSince, updateScrollHints } from './tables.js';
import { loadServer } from './server.js';
import { outcomeOf, EXECUTED, REPLAYED, MISMATCH, IN_FLIGHT, LOST, UNAVAILABLE, DECLINED } from './outcome.js';

const experiments = [];
const busyListeners = new Set();
let busy = null; // the experiment that is running a step, if any

export function isBusy() {
  return busy !== null;
}

export function onBusyChange(listener) {
  busyListeners.add(listener);
}

function setBusy(experiment) {
  busy = experiment;
  for (const e of experiments) e.renderControls();
  for (const listener of busyListeners) listener(busy !== null);
}

/** Re-renders every experiment (after a language switch). */
export function rerenderAll() {
  for (const e of experiments) e.renderAll();
}

/**
 * After the tables were emptied, an experiment that is half way through
 * starts over: its first steps' rows are gone. Finished ones keep showing
 * what happened.
 */
export function afterReset() {
  for (const e of experiments) {
    if (e.nextStep > 0 && e.nextStep < e.def.steps.length) e.startOver({ focus: false });
  }
}

let stateListener = () => {};
/** Called with every state the page reads, for the header's summary. */
export function onState(listener) {
  stateListener = listener;
}

export class Experiment {
  /**
   * def = {
   *   id,                        // used in data-testid="exp-<id>"
   *   steps: [{ label, run }],   // label: i18n key or text thunk; run: async (ctx) => void
   *   setup(ctx),                // optional, at the start of each run
   *   verdict(ctx),              // → { ok, key, params } after the last step
   *   lanes,                     // optional: the diagram's lanes (default client, API, DB)
   *   network,                   // optional: show the card network's ledger next to ours
   *   unavailable(),             // optional: why this server cannot run it (null: it can)
   *   readState(),               // optional: reads the tables instead of GET /demo/state (lesson 8 adds its receiver's)
   *   extraTables(ctx),          // optional: HTML drawn under the tables (lesson 8: the receiver's)
   * }
   */
  constructor(host, def) {
    this.def = def;
    this.host = host;
    host.classList.add('experiment');
    host.dataset.testid = `exp-${def.id}`;
    // The experiment's own headings continue the outline where it stands:
    // one level below the heading it follows.
    this.heading = precedingHeading(host);
    this.level = Math.min(6, (this.heading ? Number(this.heading.tagName.slice(1)) : 2) + 1);
    const h = this.level;
    host.innerHTML = `
      <div class="exp-controls">
        <p class="exp-steps-title" data-role="steps-title"></p>
        <ol class="steps" data-role="steps"></ol>
        <div class="exp-track" data-role="track" hidden></div>
        <div class="exp-after">
          <button type="button" class="secondary" data-testid="run-again" data-role="again" hidden></button>
        </div>
        <p class="exp-status" data-role="status" tabindex="-1" aria-live="polite"></p>
        <p class="exp-progress" data-role="progress" data-testid="progress" hidden></p>
        <p class="visually-hidden" data-role="announce" aria-live="polite"></p>
      </div>
      <div class="verdict-live" data-role="verdict" data-testid="verdict-live" role="status" aria-live="polite"></div>
      <div class="exp-body">
        <figure class="exp-diagram">
          <figcaption data-role="diagram-title"></figcaption>
          <div data-role="diagram"></div>
        </figure>
        <section class="exp-db" data-testid="db-panel" data-role="db">
          <h${h} class="exp-sub" data-role="db-title"></h${h}>
          <p class="exp-db-when" data-role="db-when"></p>
          <div data-role="db-tables"></div>
        </section>
      </div>
      <section class="exp-log" data-role="log-section" hidden>
        <h${h} class="exp-sub" data-role="log-title"></h${h}>
        <div class="cards" data-role="cards"></div>
      </section>`;
    this.el = Object.fromEntries([...host.querySelectorAll('[data-role]')].map((n) => [n.dataset.role, n]));
    this.diagram = new SequenceDiagram(this.el.diagram, { lanes: def.lanes });
    this.stepButtons = def.steps.map((step, i) => {
      const li = document.createElement('li');
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'step';
      button.dataset.testid = `step-${i + 1}`;
      button.addEventListener('click', () => this.runStep(i));
      li.append(button);
      this.el.steps.append(li);
      return button;
    });
    this.el.again.addEventListener('click', () => this.startOver());
    experiments.push(this);
    this.startOver({ focus: false });
  }

  startOver({ focus = true } = {}) {
    if (busy) return;
    this.ctx = this._newContext();
    this.stateSeq = 0;
    this.shownSeq = 0;
    this.nextStep = 0;
    this.cards = [];
    this.failure = null;
    this.result = null;
    this.diagram.clear();
    this.el.cards.innerHTML = '';
    this.el['log-section'].hidden = true;
    this.def.setup?.(this.ctx);
    this.renderAll();
    if (focus) this.stepButtons[0].focus();
  }

  _newContext() {
    const experiment = this;
    return {
      vars: {},
      diagram: this.diagram,
      baseline: null,
      latest: null,
      records: {},
      /** Sends a request and resolves once its card shows the answer and the state after it. */
      send(spec, opts) {
        return experiment._start(spec, opts).done;
      },
      /** Like send(), but returns at once: { record, answered, done }. */
      start(spec, opts) {
        return experiment._start(spec, opts);
      },
      /** Charges added since this run began. */
      newCharges() {
        return (this.latest?.charges ?? []).filter((c) => !this.baseline?.has(c.id));
      },
      /** The card network's authorizations added since this run began. */
      newAuthorizations() {
        return authorizationsSince(this.latest, this.baseline ?? new Set());
      },
      /** Reads the tables (GET /demo/state) and shows them, without a request of its own. */
      async refresh() {
        const seq = ++experiment.stateSeq;
        const state = await experiment._readState();
        experiment._setState(state, seq);
        return state;
      },
      sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
      /**
       * Shows how a wait is going (a text thunk), under the status line;
       * `ms` is kept as data-ms for the test. Not a live region: it changes
       * several times a second. Cleared when the step ends.
       */
      /** Tells a screen reader once (the progress line below is not a live region). */
      announce(text) {
        experiment.el.announce.textContent = text;
      },
      progress(text, ms = null) {
        const el = experiment.el.progress;
        el.hidden = false;
        // Kept, so that a language switch redraws it at once (renderAll), not at the next tick.
        experiment.progressText = text;
        el.textContent = text();
        if (ms === null) delete el.dataset.ms;
        else el.dataset.ms = String(Math.round(ms));
      },
    };
  }

  /**
   * Starts one request: draws its arrow and an open activation bar, adds its
   * card with a live timer, and when the answer arrives lets `narrate` draw
   * what the server did (or leaves that to the caller when narrate is false),
   * then reads the state.
   */
  _start(spec, { tag, title, narrate = null, detail = [], harm = null, explain: explainer = null, to = 'api' }) {
    const { record, done: answeredRaw } = startRequest(spec);
    this.ctx.records[tag] = record;
    const call = CALLS[spec.kind] ?? L('d.callCharge');
    // `to`: the lane the request goes to (lesson 8 posts to its receiver).
    this.diagram.message('client', to, call, { tag, kind: 'call', detail: detail.length ? detail : callDetail(spec) });
    const bar = this.diagram.openBar(tag, to, { record });
    const card = new RequestCard(record, { tag, title, harm, explainer, level: Math.min(6, this.level + 1), context: () => this.contextName() });
    this.cards.push(card);
    this.el.cards.append(card.el);
    this.el['log-section'].hidden = false;
    const answered = answeredRaw.then((rec) => {
      card.render();
      this.el.announce.textContent = rec.error
        ? t('card.explain.failed', { message: rec.error })
        : t('announce.response', { tag, status: `${rec.status} ${rec.statusText}`, ms: fmtMs(rec.elapsedMs) });
      if (narrate) narrate(this.diagram, rec, bar);
      return rec;
    });
    const done = answered.then(async (rec) => {
      try {
        const seq = ++this.stateSeq;
        const state = await this._readState();
        this._setState(state, seq);
        card.setAfter(state, this.ctx.baseline, null, this._tables());
      } catch (error) {
        card.setAfter(null, null, String(error.message || error), this._tables());
      }
      return rec;
    });
    /**
     * A request the server refused before it did anything (lesson 4: no
     * slot for a held transaction), to be sent again: its card stays, under
     * a title that says so, and no longer stands for `tag` in the records
     * (data-tag "<tag>-refused", data-refused).
     */
    const retire = (newTitle) => {
      card.title = newTitle;
      card.el.dataset.tag = `${tag}-refused`;
      card.el.dataset.refused = 'true';
      if (this.ctx.records[tag] === record) delete this.ctx.records[tag];
      card.render();
    };
    return { record, bar, answered, done, retire };
  }

  /**
   * Shows `state` unless a newer one is already shown: two requests that end
   * together read the state twice, and the answers may come back swapped.
   */
  _setState(state, seq = ++this.stateSeq) {
    if (seq < this.shownSeq) return;
    this.shownSeq = seq;
    this.ctx.latest = state;
    this.ctx.latestAt = new Date();
    stateListener(state);
    this.renderDb();
  }

  /** The tables as they are now: GET /demo/state, or what the lesson reads instead. */
  _readState() {
    return this.def.readState?.() ?? getState();
  }

  /** How this experiment draws the tables: with refunds, with the network's ledger. */
  _tables() {
    return { refunds: Boolean(this.def.refunds), network: Boolean(this.def.network) };
  }

  /** Why this server cannot run the experiment, or null. */
  unavailable() {
    return this.def.unavailable?.() ?? null;
  }

  async runStep(i) {
    if (busy || i !== this.nextStep || this.unavailable()) return;
    setBusy(this);
    this.host.dataset.state = 'running';
    this.el.status.textContent = t('exp.running');
    this.el.status.focus({ preventScroll: true });
    try {
      // The steps build their requests from the server's settings.
      await loadServer();
      if (this.ctx.baseline === null) {
        const before = await this._readState();
        this.ctx.baseline = stateIds(before);
        this._setState(before);
      }
      await this.def.steps[i].run(this.ctx);
      this.nextStep = i + 1;
      if (this.nextStep === this.def.steps.length) this._finish();
    } catch (error) {
      console.error(error);
      this.failure = String(error.message || error);
    } finally {
      this.el.progress.hidden = true;
      this.el.progress.textContent = '';
      this.progressText = null;
      // Its figure too: the next wait must not start from this one's.
      delete this.el.progress.dataset.ms;
      setBusy(null);
      this.renderAll();
      const next = this.nextStep < this.stepButtons.length ? this.stepButtons[this.nextStep] : this.el.again;
      if (document.activeElement === this.el.status || document.activeElement === document.body) next.focus({ preventScroll: true });
    }
  }

  _finish() {
    this.result = this.def.verdict(this.ctx);
    // The closing note takes the result's colour: harm in red, safety in green.
    const tone = !this.result.ok ? 'note' : this.def.tone === 'bad' ? 'harm' : 'result';
    // It counts what this run made, of the thing the lesson is about: the
    // lesson's own count (refunds), both ledgers (lesson 7), or new charges.
    const n = this.ctx.newCharges().length;
    if (this.def.countNote) {
      this.diagram.note(['db'], this.def.countNote(this.ctx), { tone });
    } else if (this.def.network) {
      const auths = this.ctx.newAuthorizations().length;
      this.diagram.note(['db', 'network'], L('d.countNoteNetwork', { n, auths }), { tone });
    } else {
      this.diagram.note(['db'], L('d.countNote', { n }), { tone });
    }
  }

  // ---- rendering -----------------------------------------------------------

  /** What this experiment is called on the page (the heading it follows), to name its regions. */
  contextName() {
    return (this.heading?.textContent ?? this.def.id).trim();
  }

  renderAll() {
    this.el['steps-title'].textContent = t('exp.steps');
    this.el['diagram-title'].textContent = t('exp.diagram');
    this.el['db-title'].textContent = t('exp.db');
    this.el['log-title'].textContent = t('exp.requests');
    this.el.again.textContent = t('exp.runAgain');
    this.def.steps.forEach((step, i) => {
      const label = typeof step.label === 'function' ? step.label() : t(step.label);
      this.stepButtons[i].innerHTML = `<span class="num" aria-hidden="true">${i + 1}</span><span class="label">${esc(label)}</span><span class="tick" aria-hidden="true">✓</span>`;
    });
    if (this.progressText && !this.el.progress.hidden) this.el.progress.textContent = this.progressText();
    this.renderControls();
    this.renderVerdict();
    this.renderDb();
    this.renderTrack();
    this.diagram.render();
    for (const card of this.cards) card.render();
  }

  renderControls() {
    const finished = this.nextStep === this.def.steps.length;
    const unavailable = this.unavailable();
    this.stepButtons.forEach((button, i) => {
      button.disabled = busy !== null || i !== this.nextStep || Boolean(unavailable);
      button.classList.toggle('done', i < this.nextStep);
      button.classList.toggle('next', i === this.nextStep);
    });
    this.el.again.hidden = this.nextStep === 0 || busy === this;
    this.el.again.disabled = busy !== null;
    if (busy === this) {
      this.el.status.textContent = t('exp.running');
      return;
    }
    this.host.dataset.state = finished ? 'done' : this.nextStep === 0 ? 'idle' : 'ready';
    let status = '';
    if (unavailable) status = unavailable;
    else if (this.failure) status = NO_ANSWER.test(this.failure) ? t('exp.noAnswer') : t('exp.error', { message: this.failure });
    else if (busy) status = t('exp.busyElsewhere');
    else if (this.nextStep === 0) status = t('exp.idle');
    else if (!finished) status = t('exp.next', { n: this.nextStep + 1 });
    this.el.status.textContent = status;
  }

  /**
   * The result box. Its live region is in the page from the start, empty;
   * a result is put into it in a later update than the one that ends the
   * run, so a screen reader that watches the region hears it (one that
   * appears and is filled at once may be skipped).
   */
  renderVerdict() {
    const live = this.el.verdict;
    clearTimeout(this.verdictTimer);
    if (!this.result || this.nextStep < this.def.steps.length) {
      live.innerHTML = '';
      return;
    }
    const fill = () => {
      live.innerHTML = this.verdictHtml();
    };
    if (live.firstElementChild) fill();
    else this.verdictTimer = setTimeout(fill, VERDICT_DELAY_MS);
  }

  verdictHtml() {
    const { ok, key, params, newCharges } = this.result;
    // What the lesson shows may be harm (a double charge) or safety (one
    // charge): the box's colour and its title say which, and a run that did
    // not show what the lesson expects says that instead.
    const tone = ok ? this.def.tone ?? 'good' : 'unexpected';
    // A parameter may be a thunk (an amount, a span of time), so it is told in the language of the moment.
    const resolved = Object.fromEntries(Object.entries(params).map(([name, value]) => [name, typeof value === 'function' ? value() : value]));
    return `<div class="verdict verdict-${tone}" data-testid="verdict" data-ok="${ok}" data-tone="${tone}" data-new-charges="${newCharges ?? this.ctx.newCharges().length}">`
      + `<strong class="verdict-title"><span class="verdict-icon" aria-hidden="true">${VERDICT_ICON[tone]}</span>${esc(t(`exp.result.${tone}`))}</strong> <span>${tHtml(`${key}.${ok ? 'ok' : 'bad'}.html`, resolved)}</span></div>`;
  }

  /** A lesson's running figure (lesson 2: the amount left to refund), one value per step. */
  renderTrack() {
    const el = this.el.track;
    const track = this.def.track?.(this.ctx);
    if (!track || !track.values.length) {
      el.hidden = true;
      el.innerHTML = '';
      return;
    }
    el.hidden = false;
    const values = track.values.map((v, i) => `<li${i === track.values.length - 1 ? ' class="current"' : ''}><span class="v">${esc(v)}</span></li>`).join('');
    el.innerHTML = `<p class="track-title" id="${this.def.id}-track-title">${esc(track.label())}</p><ol class="track" data-testid="track" aria-labelledby="${this.def.id}-track-title">${values}</ol>`;
  }

  renderDb() {
    const state = this.ctx.latest;
    if (!state) {
      this.el['db-when'].textContent = t('exp.dbNone');
      this.el['db-tables'].innerHTML = '';
      return;
    }
    this.el['db-when'].textContent = t('exp.dbWhen', { time: fmtTime(this.ctx.latestAt) });
    this.el['db-tables'].innerHTML = renderState(state, {
      baseline: this.ctx.baseline,
      context: t('exp.dbContext', { name: this.contextName() }),
      ...this._tables(),
      // Lesson 4: what the database says waits, under the tables.
      locks: Boolean(this.def.locks),
    }) + (this.def.extraTables?.(this.ctx) ?? '');
    updateScrollHints(this.el['db-tables']);
    this.renderTrack();
  }
}

/** One request as sent and as answered. */
class RequestCard {
  constructor(record, { tag, title, harm = null, explainer = null, level = 5, context = () => '' }) {
    this.record = record;
    // A lesson's own account of the answer (what it knows that the answer alone does not), or null: explain().
    this.explainer = explainer;
    this.tag = tag;
    this.title = title;
    this.harm = harm;
    this.level = level;
    this.context = context;
    this.after = null;
    this.el = document.createElement('article');
    this.el.className = 'card';
    this.el.dataset.testid = 'request';
    this.el.dataset.tag = tag;
    this.el.style.setProperty('--tag', tagColor(tag));
    this.ticker = setInterval(() => this.renderTime(), 100);
    this.render();
  }

  setAfter(state, baseline, error = null, { refunds = false, network = false } = {}) {
    this.after = { state, baseline, error, refunds, network };
    this.render();
  }

  renderTime() {
    const r = this.record;
    const timeEl = this.el.querySelector('[data-testid="elapsed"]');
    if (!timeEl) return;
    timeEl.querySelector('.ms').textContent = fmtMs(r.elapsedNow());
    if (r.elapsedMs !== null) {
      clearInterval(this.ticker);
      timeEl.dataset.ms = String(r.elapsedMs);
      timeEl.classList.remove('pending');
    }
  }

  render() {
    const r = this.record;
    const pending = r.elapsedMs === null;
    if (!pending) clearInterval(this.ticker);
    const statusText = r.error ? 'error' : pending ? '…' : `${r.status} ${r.statusText || REASONS[r.status] || ''}`.trim();
    const outcome = outcomeOf(r);
    // A request that did harm (charged again, or was acknowledged and then
    // forgotten) is never drawn in the colour of success.
    // `harm` names the harm, or tells it from the answer (a function of the record).
    const harm = typeof this.harm === 'function' && !pending ? this.harm(r) : this.harm;
    const harmed = !pending && harm && (outcome === EXECUTED || outcome === REPLAYED);
    const statusClass = pending ? 'pending' : harmed ? 'bad' : STATUS_CLASS[outcome] ?? 'bad';
    const h = this.level;
    const after = this.after;
    this.el.dataset.status = pending ? '' : String(r.status ?? 'error');
    this.el.dataset.replayed = String(r.replayed);
    this.el.dataset.harm = harmed ? harm : '';
    if (r.spec.kind === 'purge' && !pending && typeof r.json?.purged === 'number') this.el.dataset.purged = String(r.json.purged);
    this.el.innerHTML = `
      <header class="card-head">
        <span class="tag" aria-hidden="true">${esc(this.tag)}</span>
        <h${h} class="card-title"><span class="visually-hidden">${esc(t('tag.request', { tag: this.tag }))}: </span>${esc(this.title())}</h${h}>
        <span class="status status-${statusClass}" data-testid="status">${esc(statusText)}</span>
        <span class="elapsed${pending ? ' pending' : ''}" data-testid="elapsed" ${pending ? '' : `data-ms="${r.elapsedMs}"`}
          title="${esc(t('card.elapsedLabel'))}"><span class="ms">${fmtMs(r.elapsedNow())}</span>${msUnit()}</span>
      </header>
      <p class="card-explain" data-testid="explain">${esc(pending ? t('card.waiting') : this.explainer?.(r) ?? explain(r))}${
        harmed ? `${sentenceGap()}<strong class="harm-note" data-testid="harm">${esc(t(`card.harm.${harm}`))}</strong>` : ''
      }</p>
      <div class="raw">
        <div>
          <p class="raw-label">${esc(t('card.request'))}</p>
          <pre data-testid="raw-request">${rawRequest(r)}</pre>
          <p class="fine">${esc(t('card.browserAdds'))}</p>
        </div>
        <div>
          <p class="raw-label">${esc(t('card.response'))}</p>
          <pre data-testid="raw-response">${pending ? esc(t('card.waiting')) : rawResponse(r)}</pre>
          <p class="fine">${esc(t('card.formatted'))}</p>
        </div>
      </div>
      ${
        after
          ? `<details class="card-after"><summary>${esc(t('card.after'))}: ${esc(after.state ? summarize(after.state, { network: after.network, refunds: after.refunds, baseline: after.baseline }) : after.error)}</summary>
              ${after.state ? renderState(after.state, {
                baseline: after.baseline,
                compact: true,
                refunds: after.refunds,
                network: after.network,
                context: t('card.afterContext', { name: this.context(), tag: this.tag }),
              }) : ''}</details>`
          : ''
      }`;
    // Keep an open <details> open across re-renders.
    if (this.afterOpen) this.el.querySelector('details')?.setAttribute('open', '');
    this.el.querySelector('details')?.addEventListener('toggle', (e) => {
      this.afterOpen = e.target.open;
      updateScrollHints(this.el);
    });
    updateScrollHints(this.el);
  }
}

/** How a browser says that fetch() got no answer at all (Chromium, Firefox, Safari). */
const NO_ANSWER = /Failed to fetch|NetworkError|Load failed/;

/** The colour of a card's status, by what came of the request. */
const STATUS_CLASS = { [EXECUTED]: 'good', [REPLAYED]: 'good', [LOST]: 'lost', [UNAVAILABLE]: 'lost' };

/** How long after a run ends its result is put into the (already present) live region. */
const VERDICT_DELAY_MS = 120;

/** The sign before a result's title, so its meaning is not told by colour alone. */
const VERDICT_ICON = { good: '✓', bad: '⚠', unexpected: '?' };

/** The label of a request's arrow in the diagram, by what it asks for. */
const CALLS = {
  expire: L('d.callExpire'),
  purge: L('d.callPurge'),
  refund: L('d.callRefund'),
  describe: L('d.callDescribe'),
  lookup: L('d.callLookup'),
  webhook: L('d.callWebhook'),
};

/** The nearest heading before `el` in document order. */
function precedingHeading(el) {
  const found = document.evaluate(
    'preceding::*[self::h1 or self::h2 or self::h3 or self::h4 or self::h5][1]',
    el,
    null,
    XPathResult.FIRST_ORDERED_NODE_TYPE,
    null,
  );
  return found.singleNodeValue;
}

/** The card's one line on what came of the request. */
function explain(r) {
  switch (outcomeOf(r)) {
    case EXECUTED:
      if (r.spec.kind === 'expire') return t('card.explain.expired');
      if (r.spec.kind === 'purge') return t('card.explain.purged', { n: Number(r.json?.purged ?? 0) });
      if (r.spec.kind === 'refund') return t('card.explain.refunded', { amount: fmtAmount(r.json?.amount ?? 0, r.json?.currency ?? 'jpy') });
      if (r.spec.kind === 'describe') return t('card.explain.described');
      if (r.spec.kind === 'lookup') return t('card.explain.found');
      return t('card.explain.created');
    case REPLAYED:
      if (r.spec.kind === 'refund') return t('card.explain.refundReplayed');
      return t('card.explain.replayed');
    case MISMATCH:
      return t('card.explain.reused');
    case DECLINED:
      return t('card.explain.declined', { code: r.json?.decline_code ?? '?' });
    case IN_FLIGHT:
      return t('card.explain.inFlight');
    case UNAVAILABLE:
      if (r.spec.intent?.faults?.includes('network-lose-answer')) return t('card.explain.networkAnswerLost');
      if (r.spec.intent?.faults?.includes('network-down')) return t('card.explain.networkDown');
      return t('card.explain.networkUnavailable');
    case LOST:
      if (r.spec.intent?.faults?.includes('abandon')) return t('card.explain.abandoned');
      if (r.spec.intent?.faults?.includes('abandon-after-network')) return t('card.explain.abandonedAfterNetwork');
      if (r.spec.kind === 'refund') return t(r.replayed || r.spec.intent?.key ? 'card.explain.lostRefundKey' : 'card.explain.lostRefund');
      if (r.spec.kind === 'describe') return t('card.explain.lostDescribe');
      if (declines(r.spec.intent)) return t('card.explain.lostDecline');
      return t('card.explain.lost');
    default:
      if (r.error && NO_ANSWER.test(r.error)) return t('card.explain.noAnswer');
      if (r.error) return t('card.explain.failed', { message: r.error });
      if (slotRefusalOf(r)) return t('card.explain.slotBusy', slotRefusalOf(r));
      if (r.status === 500 && r.spec.intent?.faults?.includes('fail-before-commit')) return t('card.explain.plannedFailure', { status: `${r.status} ${r.statusText}` });
      if (r.spec.kind === 'lookup' && r.status === 404) return t('card.explain.notFound');
      return t('card.explain.other', { status: `${r.status} ${r.statusText}` });
  }
}

function rawRequest(r) {
  const { spec } = r;
  const lines = [`<span class="start-line">${esc(spec.method)} ${esc(spec.path)}</span>`];
  for (const [name, value] of spec.headers) {
    const cls = /^(idempotency-key|demo-)/i.test(name) ? ' class="hl"' : '';
    lines.push(`<span${cls}>${esc(name)}: ${highlightIds(esc(value))}</span>`);
  }
  if (spec.body) lines.push('', esc(spec.body));
  return lines.join('\n');
}

function rawResponse(r) {
  if (r.error) return esc(t('card.noResponse'));
  const lines = [`<span class="start-line">${r.status} ${esc(r.statusText)}</span>`];
  for (const [name, value] of r.headers) {
    const cls = /^(idempotent-replayed|location|retry-after|demo-slots)$/i.test(name) ? ' class="hl"' : '';
    lines.push(`<span${cls}>${esc(name)}: ${highlightIds(esc(value))}</span>`);
  }
  if (r.bodyText) {
    const body = r.json !== null ? JSON.stringify(r.json, null, 2) : r.bodyText;
    let shown = highlightIds(esc(body));
    // The purge's answer leads with how many rows it removed.
    if (r.spec.kind === 'purge') shown = shown.replace(/&quot;purged&quot;: \d+/, (m) => `<span class="hl">${m}</span>`);
    lines.push('', shown);
  }
  return lines.join('\n');
}

const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;
/** Colours every UUID like its chip in the tables, so the same id is easy to spot. */
function highlightIds(escaped) {
  return escaped.replace(UUID, (id) => `<span class="id-inline" style="--hue:${hue(id)}">${id}</span>`);
}

/** The request's amount as a thunk, so it follows a language switch. */
export function amountOf(spec) {
  return () => (spec.intent?.amount ? fmtAmount(spec.intent.amount, spec.intent.currency) : '');
}

/** The extra lines under a request arrow: its key and demo headers. */
function callDetail(spec) {
  const lines = [];
  const i = spec.intent ?? {};
  if (spec.kind === 'charge' || spec.kind === 'refund') {
    lines.push(L('d.amount', { amount: amountOf(spec) }));
    lines.push(i.key ? L('d.withKey', { key: shortKeyOf(i.key) }) : L('d.noKey'));
    if (i.faults?.length) lines.push(() => `Demo-Fault: ${i.faults.join(', ')}`);
    if (i.mode) lines.push(() => `Demo-Mode: ${i.mode}`);
    if (i.network) lines.push(() => 'Demo-Network: on');
  } else if (spec.kind === 'describe') {
    lines.push(() => `"description": ${JSON.stringify(i.description)}`);
    if (i.faults?.length) lines.push(() => `Demo-Fault: ${i.faults.join(', ')}`);
  } else if (spec.kind === 'lookup') {
    lines.push(() => `id ${shortKeyOf(i.chargeId)}`);
  } else if (spec.kind === 'expire') {
    lines.push(() => `key ${shortKeyOf(i.key)}`);
  }
  return lines;
}

/**
 * The demo's refusal for want of a slot to hold a transaction open (a 503
 * with Demo-Slots: held=<n>, max=<m>; Retry-After is when the first is
 * given back), or null: { held, max, retryAfter } (seconds).
 */
export function slotRefusalOf(r) {
  if (r.status !== 503) return null;
  const m = /held=(\d+),\s*max=(\d+)/.exec(r.header('Demo-Slots') ?? '');
  if (!m) return null;
  return { held: Number(m[1]), max: Number(m[2]), retryAfter: Math.max(1, Number(r.header('Retry-After')) || 1) };
}

export function shortKeyOf(key) {
  return key.length > 10 ? `${key.slice(0, 8)}…` : key;
}
