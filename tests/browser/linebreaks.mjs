// Where the page's lines break, read off the rendered page (#50, item 8):
// lessons.mjs calls these in every state it looks at, in Japanese at
// 390×844 and 1280×900 (and the header's checks in English too).
//
// - No line break inside a number with its unit ("5秒", "4,560 ms",
//   "¥300", "1.29〜1.31秒") or an identifier ("Idempotency-Key",
//   "lose-response", "delay-commit=5000"): each such run in the visible
//   text, even one that spans inline elements, is measured with
//   Range.getClientRects(), and its boxes must sit on one line.
// - The diagrams (SVG, one <text> per line): no line that is a particle or
//   a bracket alone, none that ends with an opening bracket or starts with a
//   particle or a closing mark, and no number, unit or identifier split
//   between two lines.
// - The sticky header: no line of it starts with "・" or "·", and on a phone
//   it takes at most 15 % of the screen's height.
//
// The patterns are written here, not imported from the page
// (web/js/keepwhole.js), so that the check does not share the page's mistakes.

/** The header's share of the screen a phone may give it. */
export const HEADER_MAX_SHARE = 0.15;

/**
 * Every run that broke across lines in the visible text under `root` (a selector), as "text ⟨context⟩"
 * strings, and how many runs were measured (so that a check that found
 * nothing to measure cannot pass for one that found nothing wrong).
 */
export function brokenRuns(page, root = 'body') {
  return page.evaluate((rootSelector) => {
    const UNITS = 'ミリ秒|時間|ms|min|KiB|MiB|秒|分|日|円|件|つ|回|個|通|行|%|s|h';
    const NUMBER = '\\d[\\d,]*(?:\\.\\d+)?';
    const RUN = new RegExp(
      `(?<![\\w.-])(?:[¥$€]${NUMBER}|${NUMBER}(?:[〜~–]${NUMBER})?[ \\u00a0]?(?:${UNITS})(?![A-Za-z])|[A-Za-z][A-Za-z0-9]*(?:[-=][A-Za-z0-9]+)+|\\?[a-z]+=[\\w-]*)(?![\\w-])`,
      'g',
    );
    const UUID_LIKE = /^[0-9a-f]+(?:-[0-9a-f]+){2,}$/i;
    // Drawings are checked line by line below; the database's rows hold ids
    // that must break to fit; what is hidden has no lines.
    const SKIP = 'script, style, textarea, pre, svg, [data-testid="db-panel"], .visually-hidden, [aria-hidden="true"], [hidden]';
    const blockOf = (el) => {
      for (let e = el; e; e = e.parentElement) if (!getComputedStyle(e).display.startsWith('inline')) return e;
      return document.body;
    };
    // Runs of text nodes that share a block, in document order.
    const groups = new Map();
    const walker = document.createTreeWalker(document.querySelector(rootSelector), NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const node = walker.currentNode;
      const parent = node.parentElement;
      if (!parent || !node.data.trim() || parent.closest(SKIP) || !parent.getClientRects().length) continue;
      const block = blockOf(parent);
      if (!groups.has(block)) groups.set(block, []);
      groups.get(block).push(node);
    }
    const onOneLine = (rects) => {
      const lines = [];
      for (const r of rects) {
        const line = lines.find((l) => Math.min(l.bottom, r.bottom) - Math.max(l.top, r.top) > 0.5 * Math.min(l.bottom - l.top, r.height));
        if (line) {
          line.top = Math.min(line.top, r.top);
          line.bottom = Math.max(line.bottom, r.bottom);
        } else lines.push({ top: r.top, bottom: r.bottom });
      }
      return lines.length <= 1;
    };
    const broken = [];
    let measured = 0;
    for (const nodes of groups.values()) {
      const text = nodes.map((n) => n.data).join('');
      const starts = [];
      let at = 0;
      for (const n of nodes) {
        starts.push(at);
        at += n.data.length;
      }
      // A run's start lies in the node it begins in, its end in the node it ends in.
      const locate = (offset, end) => {
        const i = nodes.findIndex((n, j) => (end ? starts[j] < offset && offset <= starts[j] + n.data.length : offset < starts[j] + n.data.length));
        return [nodes[i], offset - starts[i]];
      };
      for (const match of text.matchAll(RUN)) {
        const run = match[0];
        if (run.length > 40 || (UUID_LIKE.test(run) && /\d/.test(run))) continue;
        const range = document.createRange();
        range.setStart(...locate(match.index, false));
        range.setEnd(...locate(match.index + run.length, true));
        const rects = [...range.getClientRects()].filter((r) => r.width > 0.5 && r.height > 0.5);
        if (!rects.length) continue;
        measured += 1;
        if (!onOneLine(rects)) broken.push(`${run} ⟨${text.slice(Math.max(0, match.index - 10), match.index + run.length + 10).replace(/\s+/g, ' ')}⟩`);
      }
    }
    return { broken, measured };
  }, root);
}

/** The diagrams' lines that break badly, as "line1 | line2" strings, and how many lines were read. */
export function badDiagramLines(page) {
  return page.evaluate(() => {
    const PARTICLE_START = /^[をにがはでとへも](?![\u3041-\u309f])/;
    const CLOSE_START = /^[、。）」』】・：)\]]/;
    const ALONE = /^[をにがはでとへものや（「『【()）」』】、。・\s]+$/;
    const OPEN_END = /[（「『【(\[]$/;
    const NUMBER_UNIT = /\d[\d,]*(?:\.\d+)?(?:ミリ秒|ms|秒|分|時間|日|円|件|つ|回|個|通|行|%)/g;
    const bad = [];
    let read = 0;
    for (const svg of document.querySelectorAll('.diagram-canvas svg')) {
      if (!svg.getClientRects().length) continue;
      const texts = [...svg.querySelectorAll('text')].map((el) => ({ x: el.getAttribute('x'), y: Number(el.getAttribute('y')), s: el.textContent }));
      texts.forEach((line, i) => {
        read += 1;
        const s = line.s.trim();
        if (ALONE.test(s) || OPEN_END.test(s) || PARTICLE_START.test(s) || CLOSE_START.test(s)) bad.push(`${texts[i - 1]?.s.trim() ?? ''} | ⟨${s}⟩`);
        const next = texts[i + 1];
        // The next line of the same label: the same centre, one line lower.
        if (!next || next.x !== line.x || !(next.y > line.y && next.y - line.y <= 22)) return;
        const n = next.s.trim();
        // A number with its unit across the two lines ("4,050ミリ" | "秒").
        const tail = s.slice(-12);
        const splitNumber = [...`${tail}${n.slice(0, 12)}`.matchAll(NUMBER_UNIT)].some((m) => m.index < tail.length && m.index + m[0].length > tail.length);
        const joined = `${s.match(/[A-Za-z0-9=-]*$/)[0]}${n.match(/^[A-Za-z0-9=-]*/)[0]}`;
        const splitName = /[A-Za-z0-9][-=]$/.test(s) && /^[A-Za-z0-9]/.test(n) && joined.length <= 30;
        if (splitNumber || splitName) bad.push(`${s} | ${n}`);
      });
    }
    return { bad, read };
  });
}

/** The sticky header: its height as a share of the window's, and its lines that start with a separator. */
export function headerLines(page) {
  return page.evaluate(() => {
    const header = document.querySelector('.topbar');
    const share = header.getBoundingClientRect().height / window.innerHeight;
    const startsWithSeparator = [];
    const walker = document.createTreeWalker(header, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const node = walker.currentNode;
      if (!node.parentElement.getClientRects().length) continue;
      for (const m of node.data.matchAll(/[・·]/g)) {
        // The separator and the last letter before it must share a line.
        const before = node.data.slice(0, m.index).search(/\S\s*$/);
        if (before < 0) continue;
        const range = document.createRange();
        range.setStart(node, before);
        range.setEnd(node, m.index + 1);
        const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0.5).map((r) => Math.round(r.top / 4)));
        if (tops.size > 1) startsWithSeparator.push(node.data.slice(Math.max(0, before - 8), m.index + 10));
      }
    }
    return { share, startsWithSeparator };
  });
}
