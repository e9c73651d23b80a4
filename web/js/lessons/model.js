// Lesson 6's last section, "What goes wrong without each rule": two
// counterexamples the model checker found (crates/idempotency/tests/model),
// read from /model/counterexamples.json and drawn with the page's own
// sequence diagram, one row per row of the model's path, in its order.
//
// `cargo run -p idempotency --example counterexamples` writes that file;
// the model test `the_pages_counterexamples_are_what_the_model_finds_now`
// fails when it is no longer what the model finds, so the page never shows
// a path the model does not. The English labels are the model's own (the
// Mermaid text); Japanese ones are built from each row's action and args.

import { SequenceDiagram, L } from '../diagram.js';
import { t, tHtml, lang, onLangChange, fmtInt } from '../i18n.js';

export const COUNTEREXAMPLES_URL = '/model/counterexamples.json';

/** The model's lanes (C0, W0, R, DB, N, A) as the page names them. */
export function modelLaneLabel(lane, narrow = false) {
  const short = narrow ? 'Short' : '';
  const numbered = /^([CW])(\d+)$/.exec(lane);
  if (numbered) {
    const kind = numbered[1] === 'C' ? 'client' : 'api';
    return t(`model.lane.${kind}${short}`, { n: Number(numbered[2]) + 1 });
  }
  const named = { R: 'recovery', A: 'another' }[lane];
  if (named) return t(`model.lane.${named}${short}`);
  return t({ DB: 'lane.db', N: 'lane.network' }[lane] ?? lane);
}

/** A row's label: the model's own in English, built from its args otherwise. */
function rowText(row) {
  if (lang() === 'en') return row.note;
  const key = `model.row.${row.action}`;
  const text = t(key, row.args);
  return text === key ? row.note : text;
}

function drawRows(diagram, c) {
  diagram.clear();
  for (const row of c.rows) {
    const text = () => rowText(row);
    if (row.arrow === 'note') diagram.note([row.from], text);
    else diagram.message(row.from, row.to, text, { kind: row.arrow });
  }
  // The page's own last row (not the model's): the promise broken there.
  diagram.note(c.lanes, L(`l6.model.${c.id}.broken`), { tone: 'harm' });
}

function el(tag, attrs = {}) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  return node;
}

/** One counterexample: its heading, what went wrong, the path, how it was found. */
function mountOne(host, c) {
  const box = el('div', { class: 'model-cx', 'data-testid': 'model-counterexample', 'data-id': c.id, 'data-steps': String(c.rows.length) });
  const title = el('h4', { id: `l6-model-${c.id}` });
  const story = el('p');
  const found = el('p', { class: 'fine' });
  const drawing = el('div', { 'data-testid': 'model-diagram', role: 'group', 'aria-labelledby': title.id });
  box.append(title, story, drawing, found);
  host.append(box);
  const diagram = new SequenceDiagram(drawing, { lanes: c.lanes, laneLabel: modelLaneLabel });
  drawRows(diagram, c);
  const render = () => {
    title.textContent = t(`l6.model.${c.id}.title`);
    story.innerHTML = tHtml(`l6.model.${c.id}.story.html`);
    const b = c.bound;
    found.textContent = t('l6.model.found', {
      depth: c.depth,
      states: fmtInt(c.states_explored),
      bound: t('l6.model.bound', {
        design: b.design, foreign: b.foreign_step, clients: b.clients, workers: b.workers,
        crashes: b.crashes, lost: b.lost_answers, expiries: b.early_expiries, others: b.other_recoveries,
      }),
    });
    diagram.render();
  };
  render();
  return render;
}

/** Loads the model's counterexamples into lesson 6's last section. */
export async function mountModelSection(root) {
  const host = root.querySelector('[data-role="l6-model"]');
  if (!host) return;
  const status = el('p', { class: 'fine', 'data-testid': 'model-status' });
  host.append(status);
  let data = null;
  let failure = null;
  try {
    const res = await fetch(COUNTEREXAMPLES_URL, { cache: 'no-cache' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    data = await res.json();
  } catch (e) {
    failure = e.message;
  }
  const renders = data ? data.counterexamples.map((c) => mountOne(host, c)) : [];
  const renderStatus = () => {
    status.innerHTML = data
      ? tHtml('l6.model.source.html', { command: data.generated_by })
      : tHtml('l6.model.failed.html', { url: COUNTEREXAMPLES_URL, message: failure });
  };
  // The source line last, under both diagrams.
  host.append(status);
  renderStatus();
  host.dataset.state = data ? 'ready' : 'failed';
  onLangChange(() => {
    renderStatus();
    for (const render of renders) render();
  });
}
