// Language choice and translation.
//
// The first visit follows the browser's language (Japanese if the browser
// prefers it, English otherwise); the toggle's choice is remembered in
// localStorage. Static text lives in the HTML as data-i18n / data-i18n-html
// attributes; everything drawn later calls t() when it renders, so switching
// language re-renders instead of patching strings.

import { MESSAGES } from './messages.js';

const STORAGE_KEY = 'charges.lang';
export const LANGS = ['en', 'ja'];

let current = initialLang();
const listeners = new Set();

function initialLang() {
  try {
    const saved = localStorage.getItem(STORAGE_KEY);
    if (LANGS.includes(saved)) return saved;
  } catch {
    // Storage can be unavailable (private mode, file://); fall through.
  }
  const preferred = navigator.languages?.length ? navigator.languages : [navigator.language || 'en'];
  for (const tag of preferred) {
    const base = String(tag).toLowerCase().split('-')[0];
    if (LANGS.includes(base)) return base;
  }
  return 'en';
}

export function lang() {
  return current;
}

export function setLang(next) {
  if (!LANGS.includes(next) || next === current) return;
  current = next;
  try {
    localStorage.setItem(STORAGE_KEY, next);
  } catch {
    // Not remembered; still switched for this visit.
  }
  applyStatic(document);
  for (const listener of listeners) listener(next);
}

/** Calls `listener(lang)` after every language switch. */
export function onLangChange(listener) {
  listeners.add(listener);
}

function lookup(key) {
  const value = MESSAGES[current][key] ?? MESSAGES.en[key];
  if (value === undefined) console.warn(`i18n: no text for ${key}`);
  return value ?? key;
}

function interpolate(text, params) {
  return text.replace(/\{(\w+)\}/g, (whole, name) => (name in params ? String(params[name]) : whole));
}

/** Plain text for `key`. Use with textContent. */
export function t(key, params = {}) {
  const value = lookup(key);
  return typeof value === 'function' ? value(params) : interpolate(value, params);
}

/**
 * Markup for a `*.html` key, with every text parameter HTML-escaped first.
 * A boolean or a number is passed on as it is: escaping made `false` the
 * text "false", which a message testing `p.recovered ?` took for true.
 */
export function tHtml(key, params = {}) {
  const safe = {};
  for (const [name, value] of Object.entries(params)) {
    safe[name] = typeof value === 'boolean' || typeof value === 'number' ? value : escapeHtml(value);
  }
  return t(key, safe);
}

export function escapeHtml(value) {
  return String(value)
    .replaceAll('&', '&amp;')
    .replaceAll('<', '&lt;')
    .replaceAll('>', '&gt;')
    .replaceAll('"', '&quot;')
    .replaceAll("'", '&#39;');
}

/** Fills every element under `root` that names its text with data-i18n*. */
export function applyStatic(root) {
  document.documentElement.lang = current;
  document.title = t('page.title');
  for (const el of root.querySelectorAll('[data-i18n]')) el.textContent = t(el.dataset.i18n);
  for (const el of root.querySelectorAll('[data-i18n-html]')) el.innerHTML = t(el.dataset.i18nHtml);
  for (const el of root.querySelectorAll('[data-i18n-aria-label]')) {
    el.setAttribute('aria-label', t(el.dataset.i18nAriaLabel));
  }
}

// ---- formatting -----------------------------------------------------------

/** What stands between two sentences: a space in English, nothing after Japanese 。. */
export function sentenceGap() {
  return current === 'ja' ? '' : ' ';
}

export function fmtInt(n) {
  return new Intl.NumberFormat(current === 'ja' ? 'ja-JP' : 'en-US').format(Math.round(n));
}

/** An amount in the currency's minor unit, e.g. (1000, 'jpy') → "¥1,000" / "1,000円". */
export function fmtAmount(amount, currency) {
  const code = String(currency || '').toUpperCase();
  if (code === 'JPY' && current === 'ja') return `${fmtInt(amount)}円`;
  try {
    const format = new Intl.NumberFormat(current === 'ja' ? 'ja-JP' : 'en-US', { style: 'currency', currency: code });
    const digits = format.resolvedOptions().maximumFractionDigits;
    return format.format(amount / 10 ** digits);
  } catch {
    return `${amount} ${currency}`;
  }
}

/** A wall-clock time with milliseconds, in the reader's time zone. */
export function fmtTime(isoOrDate) {
  const date = isoOrDate instanceof Date ? isoOrDate : new Date(isoOrDate);
  if (Number.isNaN(date.getTime())) return String(isoOrDate ?? '');
  const hms = date.toLocaleTimeString(current === 'ja' ? 'ja-JP' : 'en-GB', { hour12: false });
  return `${hms}.${String(date.getMilliseconds()).padStart(3, '0')}`;
}

/** A date and time to the millisecond, e.g. "3 Dec, 18:38:13.148" / "12月3日 18:38:13.148". */
export function fmtDateTime(isoOrDate) {
  const date = isoOrDate instanceof Date ? isoOrDate : new Date(String(isoOrDate).replace(/(\.\d{3})\d+/, '$1'));
  if (Number.isNaN(date.getTime())) return String(isoOrDate ?? '');
  const day = date.toLocaleDateString(current === 'ja' ? 'ja-JP' : 'en-GB', { month: current === 'ja' ? 'numeric' : 'short', day: 'numeric' });
  return `${day} ${fmtTime(date)}`;
}

/**
 * A stretch of time in words, coarse where it is long:
 * 86_340_000 → "23 h 59 min", 65_000 → "1 min 5 s", 1200 → "1.2 s", 4000 → "4 s".
 */
export function fmtSpan(ms) {
  const ja = current === 'ja';
  const u = ja ? { h: '時間', min: '分', s: '秒' } : { h: ' h', min: ' min', s: ' s' };
  const abs = Math.abs(ms);
  if (abs >= 3_600_000) {
    const h = Math.floor(abs / 3_600_000);
    const min = Math.floor((abs % 3_600_000) / 60_000);
    return `${h}${u.h}${min ? `${ja ? '' : ' '}${min}${u.min}` : ''}`;
  }
  if (abs >= 60_000) {
    const min = Math.floor(abs / 60_000);
    const s = Math.floor((abs % 60_000) / 1000);
    return `${min}${u.min}${s ? `${ja ? '' : ' '}${s}${u.s}` : ''}`;
  }
  if (abs >= 10_000 || abs % 1000 < 50) return `${Math.round(abs / 1000)}${u.s}`;
  return `${(abs / 1000).toFixed(1)}${u.s}`;
}

/**
 * Time left before something happens, as a live countdown shows it: m:ss
 * under an hour ("0:42", "59:59"), "about 2 h" / "約2時間" beyond (never
 * "7198 s").
 */
export function fmtCountdown(ms) {
  const ja = current === 'ja';
  const secs = Math.max(0, Math.ceil(ms / 1000));
  if (secs >= 3600) {
    const h = Math.max(1, Math.round(secs / 3600));
    return ja ? `約${h}時間` : `about ${h} h`;
  }
  return `${Math.floor(secs / 60)}:${String(secs % 60).padStart(2, '0')}`;
}

/** A duration as the page shows it, e.g. 4009 → "4,009". */
export function fmtMs(ms) {
  return fmtInt(ms);
}

/**
 * What follows a number of milliseconds: " ms" in English, "ミリ秒" in
 * Japanese, where every unit is written against its number ("2.0秒",
 * "4,560ミリ秒", "3件"), never with a space.
 */
export function msUnit() {
  return current === 'ja' ? 'ミリ秒' : ' ms';
}

/**
 * A length of time in words, e.g. 86400 → "24 hours" / "24時間", 60 →
 * "1 minute" / "1分". In Japanese the number and its unit are written
 * together, and without 間, so that it reads both as a length (「24時間保持」)
 * and before ごと (「1分ごと」).
 */
export function fmtDuration(seconds) {
  const ja = current === 'ja';
  if (seconds % 86400 === 0 && seconds >= 86400 * 2) return ja ? `${seconds / 86400}日` : `${seconds / 86400} days`;
  if (seconds % 3600 === 0) {
    const h = seconds / 3600;
    return ja ? `${h}時間` : `${h} ${h === 1 ? 'hour' : 'hours'}`;
  }
  if (seconds % 60 === 0) {
    const m = seconds / 60;
    return ja ? `${m}分` : `${m} ${m === 1 ? 'minute' : 'minutes'}`;
  }
  return ja ? `${seconds}秒` : `${seconds} ${seconds === 1 ? 'second' : 'seconds'}`;
}
