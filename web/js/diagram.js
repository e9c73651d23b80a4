// A hand-rolled, live sequence diagram with three lanes (Client, API, DB), or
// the lanes an experiment asks for (lesson 7 adds the card network).
//
// The diagram is a list of rows drawn top to bottom (messages and notes),
// plus activation bars that span rows. A lesson appends rows as things
// happen; while a request is still waiting for its answer its bar stays open
// and grows with the time that passes, so a long wait is drawn long. When
// nothing happened for a while between two rows, a "time passes" gap is kept
// in the drawing.
//
// Texts are passed as functions (() => string) so the whole drawing can be
// re-rendered in the other language.

import { t, escapeHtml as esc } from './i18n.js';

/** The lanes, left to right, unless an experiment asks for others. */
export const LANES = ['client', 'api', 'db'];

const TAG_COLORS = { A: '#2b6585', B: '#8f4a10', C: '#4f6b22', D: '#6b4a8a' };
const INK = '#28343b';
const MUTED = '#55656f';
const LOST = '#a4262c';
const FONT = 'system-ui, -apple-system, "Segoe UI", "Hiragino Sans", "Noto Sans JP", "Yu Gothic", "IPAGothic", sans-serif';
const GAP_VISIBLE_AFTER_MS = 400;
/** A message's label is given at least this much room, even between two inner lanes. */
const INNER_LABEL_MIN_W = 180;
// A thin outline in the background colour keeps labels readable where they cross a lifeline.
const HALO = ' stroke="#fbfcfc" stroke-width="3" stroke-linejoin="round" paint-order="stroke"';

export function tagColor(tag) {
  return TAG_COLORS[tag] ?? MUTED;
}

/**
 * A text thunk for t(): `L('key', {…})`. A parameter may itself be a function,
 * so values that depend on the language (an amount, a time) follow a switch.
 */
export const L = (key, params = {}) => () => {
  const resolved = {};
  for (const [name, value] of Object.entries(params)) resolved[name] = typeof value === 'function' ? value() : value;
  return t(key, resolved);
};

export class SequenceDiagram {
  /**
   * laneLabel(lane, narrow): a lane's name; by default the page's own lanes'
   * (lane.client …). A diagram with lanes of its own (the model's
   * counterexamples) names them; `narrow` asks for a short name, for the
   * boxes of a phone-wide drawing.
   */
  constructor(host, { lanes = LANES, laneLabel = (lane) => t(`lane.${lane}`) } = {}) {
    this.host = host;
    this.lanes = lanes;
    this.laneLabel = laneLabel;
    this.host.classList.add('diagram');
    this.emptyNote = document.createElement('p');
    this.emptyNote.className = 'diagram-empty';
    this.canvas = document.createElement('div');
    this.canvas.className = 'diagram-canvas';
    this.canvas.setAttribute('aria-hidden', 'true');
    this.textList = document.createElement('ol');
    this.textList.className = 'visually-hidden';
    this.host.append(this.emptyNote, this.canvas, this.textList);
    this.rows = [];
    this.bars = [];
    this.lastEventAt = null;
    this.ticker = null;
    this.width = 0;
    new ResizeObserver(() => {
      const w = Math.floor(this.canvas.clientWidth);
      if (w && w !== this.width) this.render();
    }).observe(this.canvas);
    this.render();
  }

  clear() {
    this.rows = [];
    this.bars = [];
    this.lastEventAt = null;
    this._stopTicker();
    this.render();
  }

  /**
   * An arrow from one lane to another.
   *  kind: 'call' (solid), 'reply' (dashed) or 'lost' (dashed, broken off with a cross).
   *  detail: more lines under the label (e.g. the key), as text thunks.
   */
  message(from, to, text, { tag = null, kind = 'call', detail = [] } = {}) {
    return this._push({ type: 'message', from, to, text, tag, kind, detail });
  }

  /** A note box spanning `lanes` (one lane or several). */
  note(lanes, text, { tag = null, tone = 'note' } = {}) {
    return this._push({ type: 'note', lanes, text, tag, tone });
  }

  /**
   * An activation bar on `lane`, from the latest row down. It stays open (and
   * grows while time passes) until closeBar(). kind: 'run' or 'wait'.
   * `record` (optional) is a pending request whose elapsed time is shown.
   */
  openBar(tag, lane, { kind = 'run', record = null } = {}) {
    const bar = { tag, lane, kind, record, start: Math.max(0, this.rows.length - 1), end: null };
    this.bars.push(bar);
    this._startTicker();
    this.render();
    return bar;
  }

  closeBar(bar) {
    if (!bar || bar.end !== null) return;
    bar.end = Math.max(bar.start, this.rows.length - 1);
    if (!this._openBars().length) this._stopTicker();
    this.render();
  }

  _openBars() {
    return this.bars.filter((b) => b.end === null);
  }

  _push(row) {
    const now = performance.now();
    if (this._openBars().length && this.lastEventAt !== null && now - this.lastEventAt > GAP_VISIBLE_AFTER_MS) {
      this.rows.push({ type: 'gap', ms: now - this.lastEventAt });
    }
    this.lastEventAt = now;
    this.rows.push(row);
    this.render();
    return this.rows.length - 1;
  }

  _startTicker() {
    if (this.lastEventAt === null) this.lastEventAt = performance.now();
    if (!this.ticker) this.ticker = setInterval(() => this.render(), 100);
  }

  _stopTicker() {
    clearInterval(this.ticker);
    this.ticker = null;
  }

  // ---- drawing -------------------------------------------------------------

  render() {
    this.emptyNote.textContent = t('exp.diagramEmpty');
    this.emptyNote.hidden = this.rows.length > 0 || this.bars.length > 0;
    this.canvas.hidden = !this.emptyNote.hidden;
    this._renderTextList();
    if (this.canvas.hidden) return;

    const W = Math.max(280, Math.floor(this.canvas.clientWidth || this.host.clientWidth || 640));
    this.width = W;
    const m = metrics(W);
    // Participant boxes as wide as their names need (Japanese names are longer).
    const lanes = this.lanes;
    const widest = Math.max(...lanes.map((lane) => measure(this.laneLabel(lane, m.narrow), m.font, false)));
    m.boxW = Math.min(W / lanes.length - 8, Math.max(m.boxW, widest + 18));
    // The outer lanes at the edges, the others evenly between them.
    const first = m.pad + m.boxW / 2;
    const span = W - m.pad - m.boxW / 2 - first;
    const lx = Object.fromEntries(lanes.map((lane, i) => [lane, first + (span * i) / (lanes.length - 1)]));
    lx.first = lx[lanes[0]];
    lx.last = lx[lanes[lanes.length - 1]];

    const out = [];
    const layout = [];
    let y = m.top;
    for (const row of this.rows) {
      const box = this._layoutRow(row, y, lx, m, W);
      layout.push(box);
      y += box.h;
    }
    const open = this._openBars();
    // One live timer per pending request (a request may have two open bars,
    // its run on the API and its wait on the DB), each on a line of its own
    // at the foot of the drawing, so two timers never overlap.
    const timers = [];
    for (const bar of open) {
      if (bar.record && !timers.some((tm) => tm.record === bar.record)) timers.push(bar);
    }
    if (open.length) {
      const tail = liveTail(performance.now() - (this.lastEventAt ?? performance.now()));
      y += Math.max(tail, timers.length * m.smallLine + 10);
    }
    const H = Math.ceil(y + 12);

    // Lifelines.
    for (const lane of lanes) {
      out.push(`<line x1="${lx[lane]}" y1="${m.boxH + 6}" x2="${lx[lane]}" y2="${H}" stroke="#9cabb5" stroke-width="1.2" stroke-dasharray="4 4"/>`);
    }

    // Activation bars, stepped sideways when they overlap on one lane.
    for (const [i, bar] of this.bars.entries()) {
      const level = this.bars
        .slice(0, i)
        .filter((b) => b.lane === bar.lane && (b.end === null || b.end >= bar.start)).length;
      const bx = lx[bar.lane] - 5 + level * 8;
      const y0 = layout[bar.start] ? layout[bar.start].anchorY : m.top;
      const y1 = bar.end === null ? H - 8 : layout[bar.end].anchorY;
      const color = tagColor(bar.tag);
      const fill = bar.kind === 'wait' ? 'url(#wait-hatch)' : '#edf3ef';
      out.push(`<rect x="${bx}" y="${y0}" width="10" height="${Math.max(6, y1 - y0)}" fill="${fill}" stroke="${color}" stroke-width="1.3" rx="1.5"/>`);
    }
    // The live timers, last one lowest, each next to the lane its request is on.
    timers.forEach((bar, i) => {
      const label = `${bar.tag}: ${t('d.waitingLive', { ms: Math.round(bar.record.elapsedNow()).toLocaleString() })}`;
      const ty = H - 10 - (timers.length - 1 - i) * m.smallLine;
      const anchorLeft = bar.lane === lanes[lanes.length - 1] || bar.lane === 'db';
      const bx = lx[bar.lane];
      out.push(text(anchorLeft ? bx - 12 : bx + 16, ty, label, { size: m.small, fill: tagColor(bar.tag), anchor: anchorLeft ? 'end' : 'start', weight: 600 }));
    });

    for (const [i, row] of this.rows.entries()) out.push(this._drawRow(row, layout[i], lx, m, W));

    // Participants on top.
    for (const lane of lanes) {
      out.push(`<rect x="${lx[lane] - m.boxW / 2}" y="4" width="${m.boxW}" height="${m.boxH}" rx="4" fill="#eaf1f5" stroke="#9cabb5"/>`);
      out.push(text(lx[lane], 4 + m.boxH / 2 + m.font * 0.36, this.laneLabel(lane, m.narrow), { size: m.font, weight: 600 }));
    }

    this.canvas.innerHTML =
      `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family='${FONT}'>` +
      `<defs><pattern id="wait-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">` +
      `<rect width="6" height="6" fill="#fbf3e6"/><line x1="0" y1="0" x2="0" y2="6" stroke="#c89a5a" stroke-width="2"/></pattern></defs>` +
      out.join('') +
      `</svg>`;
  }

  _layoutRow(row, top, lx, m, W) {
    if (row.type === 'gap') {
      const h = gapHeight(row.ms);
      return { h, anchorY: top + h / 2 };
    }
    if (row.type === 'message') {
      // The label may use the room beyond an outer lane (nothing is drawn
      // there), which matters on a phone.
      const [a, b] = [lx[row.from], lx[row.to]].sort((p, q) => p - q);
      let left = a === lx.first ? m.pad : a + 8;
      let right = b === lx.last ? W - m.pad : b - 8;
      // Between two inner lanes (four lanes: API and DB) the gap is narrow:
      // the label may reach over the lifeline to its right, never over the
      // activation bars on its left lane.
      const want = Math.min(W - 2 * m.pad, INNER_LABEL_MIN_W);
      if (a !== lx.first && b !== lx.last && right - left < want) {
        left = Math.max(a + 12, Math.min((a + b) / 2 - want / 2, W - m.pad - want));
        right = Math.min(W - m.pad, left + want);
      } else if (right - left < want) {
        // Beside an outer lane (a reply to the client): over the inner lifeline,
        // so a header or problem name fits whole instead of breaking at a hyphen.
        if (a === lx.first) right = Math.min(W - m.pad, left + want);
        else left = Math.max(m.pad, right - want);
      }
      const maxW = Math.max(70, right - left - 6);
      const lines = wrap(prefixed(row), maxW, m.font);
      const details = row.detail.flatMap((d) => wrap(d(), maxW, m.small, true));
      const h = 8 + lines.length * m.line + details.length * m.smallLine + 12;
      return { h, lines, details, anchorY: top + h - 7, top, cx: (left + right) / 2 };
    }
    // note
    const xs = row.lanes.map((l) => lx[l]);
    let left = Math.min(...xs) - m.boxW * 0.45;
    let right = Math.max(...xs) + m.boxW * 0.45;
    if (row.lanes.length === 1) {
      // As wide as the text wants (within reason), kept inside the drawing.
      const want = Math.min(W * 0.62, Math.max(m.boxW * 1.8, measure(prefixed(row), m.font, false) + 24));
      left = xs[0] - want / 2;
      right = xs[0] + want / 2;
      if (right > W - m.pad) [left, right] = [left - (right - (W - m.pad)), W - m.pad];
      if (left < m.pad) [left, right] = [m.pad, right + (m.pad - left)];
    }
    left = Math.max(m.pad, left);
    right = Math.min(W - m.pad, right);
    const lines = wrap(prefixed(row), right - left - 14, m.font);
    const boxH = lines.length * m.line + 10;
    return { h: boxH + 12, lines, left, right, boxH, anchorY: top + 6, top };
  }

  _drawRow(row, box, lx, m) {
    if (row.type === 'gap') {
      const s = (row.ms / 1000).toFixed(1);
      return text(m.pad + 2, box.anchorY + m.small * 0.35, `⋯ ${t('d.gap', { s })}`, { size: m.small, fill: MUTED, anchor: 'start', style: 'italic' });
    }
    const color = row.tag ? tagColor(row.tag) : INK;
    if (row.type === 'note') {
      const fill = { result: '#eef5ee', harm: '#fbeae8' }[row.tone] ?? '#f7f1e5';
      const stroke = { result: '#8fb096', harm: '#d9a39c' }[row.tone] ?? '#c5b99b';
      const parts = [`<rect x="${box.left}" y="${box.top + 4}" width="${box.right - box.left}" height="${box.boxH}" rx="3" fill="${fill}" stroke="${stroke}"/>`];
      const cx = (box.left + box.right) / 2;
      box.lines.forEach((line, i) => {
        parts.push(textLine(cx, box.top + 4 + 5 + (i + 1) * m.line - 4, line, row, i, m.font, color));
      });
      return parts.join('');
    }
    // message
    const x1 = lx[row.from];
    const x2 = lx[row.to];
    const dir = Math.sign(x2 - x1) || 1;
    const sx = x1 + dir * 6;
    const ex = x2 - dir * 6;
    const ay = box.anchorY;
    const cx = box.cx;
    const parts = [];
    box.lines.forEach((line, i) => {
      parts.push(textLine(cx, box.top + 6 + (i + 1) * m.line - 4, line, row, i, m.font, color));
    });
    const detailTop = box.top + 6 + box.lines.length * m.line;
    box.details.forEach((line, i) => {
      parts.push(text(cx, detailTop + (i + 1) * m.smallLine - 3, line, { size: m.small, fill: MUTED, mono: true }));
    });
    if (row.kind === 'lost') {
      // Broken off before the first lifeline it would cross, so the cross
      // never sits on a lane it did not reach (the network's answer, lost
      // on its way to the API, is not lost at the DB).
      const crossed = this.lanes.map((lane) => lx[lane]).filter((x) => (x - x1) * dir > 0 && (x2 - x) * dir > 0);
      const near = crossed.length ? crossed.reduce((a, b) => (Math.abs(a - x1) < Math.abs(b - x1) ? a : b)) : null;
      const bx = near === null ? sx + (ex - sx) * 0.55 : (sx + near) / 2;
      parts.push(`<line x1="${sx}" y1="${ay}" x2="${bx}" y2="${ay}" stroke="${color}" stroke-width="1.6" stroke-dasharray="5 4"/>`);
      parts.push(`<path d="M${bx - 6} ${ay - 6} L${bx + 6} ${ay + 6} M${bx - 6} ${ay + 6} L${bx + 6} ${ay - 6}" stroke="${LOST}" stroke-width="2.6" stroke-linecap="round"/>`);
      return parts.join('');
    }
    const dash = row.kind === 'reply' ? ' stroke-dasharray="5 4"' : '';
    parts.push(`<line x1="${sx}" y1="${ay}" x2="${ex - dir * 2}" y2="${ay}" stroke="${color}" stroke-width="1.6"${dash}/>`);
    if (row.kind === 'reply') {
      parts.push(`<path d="M${ex - dir * 8} ${ay - 4.5} L${ex} ${ay} L${ex - dir * 8} ${ay + 4.5}" fill="none" stroke="${color}" stroke-width="1.6"/>`);
    } else {
      parts.push(`<path d="M${ex - dir * 9} ${ay - 4.5} L${ex} ${ay} L${ex - dir * 9} ${ay + 4.5} Z" fill="${color}"/>`);
    }
    return parts.join('');
  }

  _renderTextList() {
    const items = this.rows.map((row) => {
      if (row.type === 'gap') return t('d.gap', { s: (row.ms / 1000).toFixed(1) });
      const head = `${this.laneLabel(row.type === 'message' ? row.from : row.lanes[0], false)}${row.type === 'message' ? ` → ${this.laneLabel(row.to, false)}` : ''}`;
      const detail = row.type === 'message' ? row.detail.map((d) => d()).join('; ') : '';
      return `${head}: ${prefixed(row)}${detail ? ` (${detail})` : ''}`;
    });
    const html = items.map((s) => `<li>${esc(s)}</li>`).join('');
    if (this.textList.innerHTML !== html) this.textList.innerHTML = html;
  }
}

// ---- helpers ----------------------------------------------------------------

function metrics(W) {
  const narrow = W < 520;
  const font = narrow ? 12 : 13;
  const small = narrow ? 11 : 11.5;
  return {
    narrow,
    font,
    small,
    line: font + 5,
    smallLine: small + 4,
    pad: 4,
    boxW: narrow ? 72 : 104,
    boxH: 28,
    top: 46,
  };
}

function prefixed(row) {
  const label = row.text();
  return row.tag ? `${row.tag}: ${label}` : label;
}

function gapHeight(ms) {
  return Math.max(16, Math.min(140, ms / 30));
}

function liveTail(ms) {
  return Math.max(18, Math.min(150, ms / 30));
}

/** One text line; its leading "A:" tag, if any, is drawn bold in the tag's colour. */
function textLine(x, y, line, row, index, size, color) {
  const halo = row.type === 'note' ? '' : HALO;
  if (index === 0 && row.tag && line.startsWith(`${row.tag}:`)) {
    const rest = line.slice(row.tag.length + 1);
    return `<text x="${x}" y="${y}" text-anchor="middle" font-size="${size}" fill="${INK}"${halo}><tspan font-weight="700" fill="${color}">${esc(row.tag)}:</tspan>${esc(rest)}</text>`;
  }
  return text(x, y, line, { size, fill: INK, halo: row.type !== 'note' });
}

function text(x, y, content, { size = 13, fill = INK, anchor = 'middle', weight = 400, mono = false, style = 'normal', halo = true } = {}) {
  const family = mono ? ` font-family="ui-monospace, SFMono-Regular, Menlo, Consolas, 'DejaVu Sans Mono', monospace"` : '';
  const italic = style === 'italic' ? ' font-style="italic"' : '';
  return `<text x="${x}" y="${y}" text-anchor="${anchor}" font-size="${size}" font-weight="${weight}" fill="${fill}"${family}${italic}${halo ? HALO : ''}>${esc(content)}</text>`;
}

// Text measurement for wrapping, with a canvas using the same font stack.
const measureCtx = document.createElement('canvas').getContext('2d');
function measure(s, size, mono) {
  measureCtx.font = `${size}px ${mono ? 'ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace' : FONT}`;
  return measureCtx.measureText(s).width;
}

const CJK = '\\u3000-\\u30ff\\u3400-\\u9fff\\uff00-\\uffef';
const TOKEN = new RegExp(`[${CJK}]|[^\\s${CJK}]+\\s*|\\s+`, 'g');
const CJK_CHAR = new RegExp(`^[${CJK}]$`);
const NO_LINE_START = /^[、。，．）」』】・：ー）)\]]/;

const SEGMENTER = typeof Intl.Segmenter === 'function' ? new Intl.Segmenter('ja', { granularity: 'word' }) : null;
const KANA_ONLY = /^[\u3041-\u309f、。）」』]+$/;

/**
 * Japanese as phrases: the runs of CJK text cut into words, and a word of
 * hiragana alone (a particle, an ending: して, を) kept with the word before
 * it, so a line never breaks inside 記録して or スタンバイ.
 */
function cjkPhrases(tokens) {
  if (!SEGMENTER) return tokens;
  const out = [];
  let run = '';
  const flush = () => {
    if (!run) return;
    for (const { segment } of SEGMENTER.segment(run)) {
      if (out.length && KANA_ONLY.test(segment) && CJK_END.test(out[out.length - 1]) && !SENTENCE_END.test(out[out.length - 1])) out[out.length - 1] += segment;
      else out.push(segment);
    }
    run = '';
  };
  for (const tok of tokens) {
    if (CJK_CHAR.test(tok)) run += tok;
    else {
      flush();
      out.push(tok);
    }
  }
  flush();
  // A single kanji before a word of kanji is mostly a prefix (未確定, 再送): keep them together.
  for (let i = out.length - 2; i >= 0; i -= 1) {
    if (ONE_KANJI.test(out[i]) && KANJI_START.test(out[i + 1])) out.splice(i, 2, out[i] + out[i + 1]);
  }
  // A number and the counter after it (2回, 1件, 1,000円) are one phrase.
  for (let i = out.length - 2; i >= 0; i -= 1) {
    if (NUMBER.test(out[i]) && CJK_START.test(out[i + 1])) out.splice(i, 2, out[i] + out[i + 1]);
  }
  return out;
}
const CJK_END = new RegExp(`[${CJK}]$`);
/** Where a Japanese line may always end. */
const SENTENCE_END = /[。、]$/;
const ONE_KANJI = /^[\u3400-\u9fff]$/;
const KANJI_START = /^[\u3400-\u9fff]/;
const NUMBER = /^\d[\d,.]*$/;
const CJK_START = new RegExp(`^[${CJK}]`);

/**
 * The pieces a line may break between: words for Latin text, phrases for
 * Japanese, and never inside a number with its unit ("5秒", "4,560 ms"),
 * after an opening bracket, before a closing one or before a particle, so
 * that no line is left with "を" or "（" alone.
 */
function pieces(s) {
  const out = [];
  for (const tok of cjkPhrases(String(s).match(TOKEN) ?? [])) {
    const prev = out[out.length - 1];
    // A space belongs to the piece before it (where a line may end).
    const glue = prev !== undefined && (/^\s+$/.test(tok)
      || OPENS_AT_END.test(prev)
      || (/\d$/.test(prev) && JA_LETTER_START.test(tok))
      || (/\dミリ$/.test(prev) && /^秒/.test(tok))
      || (/\d\s$/.test(prev) && LATIN_UNIT.test(tok))
      || NO_LINE_START.test(tok)
      || (KANA_ONLY.test(tok) && tok.length <= 3 && !SENTENCE_END.test(prev) && !/^[。、]/.test(tok)));
    if (glue) out[out.length - 1] = prev + tok;
    else out.push(tok);
  }
  return out;
}
const OPENS_AT_END = /[（「『【(\[]$/;
const JA_LETTER_START = /^[\u3041-\u30ff\u3400-\u9fff]/;
const NAME = /^[A-Za-z][A-Za-z0-9_]*(?:[-=][A-Za-z0-9_.]+)+[)）、,・]?$/;
const LATIN_UNIT = /^(?:ms|s|min|h|KiB|MiB|%)(?![A-Za-z])/;

/** Greedy wrapping by pieces(); an identifier breaks after "-", "=", "/" or ":" only if it cannot fit a line whole. */
export function wrap(s, maxW, size, mono = false) {
  const lines = [];
  let line = '';
  const fits = (tok, room = maxW) => measure(tok.trim(), size, mono) <= room;
  // Too wide whole: a path breaks after "/" or ":" first; a name (a header, a
  // problem type) may reach a little past its room rather than break at a
  // hyphen, and breaks after "-" or "=" only if it must.
  const tokens = pieces(s).flatMap((tok) => (fits(tok) ? [tok] : tok.split(/(?<=[/:])(?=[^\s])/)))
    .flatMap((tok) => (fits(tok) || (NAME.test(tok.trim()) && fits(tok, maxW * 1.2)) ? [tok] : tok.split(/(?<=[-=])(?=[^\s])/)));
  for (const token of tokens) {
    const candidate = line + token;
    if (!line || measure(candidate.trimEnd(), size, mono) <= maxW) {
      line = candidate;
      continue;
    }
    lines.push(line.trimEnd());
    line = token.trimStart();
  }
  if (line.trim()) lines.push(line.trimEnd());
  // Break any single word that is still too wide (keys, long paths).
  return lines.flatMap((l) => (fits(l) || (NAME.test(l) && fits(l, maxW * 1.2)) ? [l] : hardBreak(l, maxW, size, mono)));
}

function hardBreak(s, maxW, size, mono) {
  const out = [];
  let line = '';
  for (const ch of s) {
    if (line && measure(line + ch, size, mono) > maxW) {
      out.push(line);
      line = '';
    }
    line += ch;
  }
  if (line) out.push(line);
  return out;
}
