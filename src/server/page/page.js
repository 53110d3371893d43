// The live page's behaviour. It polls three JSON endpoints of the server it
// came from and draws them; the chat box streams through the OpenAI API.
//   /v1/memory          every second: the budget bars (four terms per device)
//   /v1/memory/blocks   twice a second: the block grid and the requests
//                       (?detail=ID adds the tokens of the selected request)
//   /v1/memory/history  every two seconds: the charts (1 s samples, 5 minutes)
// Polling pauses while the tab is hidden. A 401 asks for the API key once
// (kept for the tab's session); a failed fetch shows the server as down and
// keeps retrying.
'use strict';

const $ = (id) => document.getElementById(id);
const state = {
  key: sessionStorage.getItem('headroom-api-key') || '',
  asking: false,
  down: false,
  downSince: null,
  model: '',
  memory: null,
  blocks: null,
  history: null,
  selected: 0,           // request id whose cells are outlined and detailed
  preemptions: null,     // the last snapshot's count, to flash on a rise
  rowPreemptions: new Map(),
  grids: [],             // per pool: {canvas, cols, cell, n}
};

// ---- formatting ------------------------------------------------------------
function bytes(n) {
  if (n == null) return '?';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  let v = n;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; ++i; }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)) + ' ' + units[i];
}
const count = (n) => Number(n).toLocaleString('en-US');
const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v; else if (k === 'style') e.style.cssText = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

// ---- talking to the server ---------------------------------------------------
class KeyNeeded extends Error {}
class Loading extends Error {}

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (state.key) headers.Authorization = 'Bearer ' + state.key;
  let res;
  try {
    res = await fetch(path, Object.assign({}, options, { headers, cache: 'no-store' }));
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    setDown(true);
    throw e;
  }
  setDown(false);
  if (res.status === 401) { askKey(Boolean(state.key)); throw new KeyNeeded(); }
  if (res.status === 503 && path !== '/v1/chat/completions') {
    const body = await res.json().catch(() => ({}));
    if (body.error && body.error.code === 'model_loading') { setStatus('loading', 'model loading'); throw new Loading(); }
  }
  return res;
}

function setStatus(kind, text) {
  const s = $('status');
  s.dataset.state = kind;
  s.textContent = text;
}

function setDown(down) {
  if (down === state.down) return;
  state.down = down;
  document.body.classList.toggle('down', down);
  const banner = $('banner');
  if (down) {
    state.downSince = new Date();
    banner.textContent = 'The server at ' + location.host + ' is not answering (since ' +
      state.downSince.toLocaleTimeString() + '). What is shown is its last known state; retrying.';
    banner.hidden = false;
    setStatus('down', 'server down');
  } else {
    banner.hidden = true;
    setStatus('live', 'live');
  }
}

function askKey(refused) {
  if (state.asking) return;
  state.asking = true;
  setStatus('key', 'API key needed');
  $('key-error').hidden = !refused;
  $('key-input').value = '';
  $('key-dialog').showModal();
}

$('key-form').addEventListener('submit', () => {
  state.key = $('key-input').value.trim();
  sessionStorage.setItem('headroom-api-key', state.key);
  state.asking = false;
  refreshAll();
});
$('key-dialog').addEventListener('cancel', (e) => e.preventDefault());

// Runs fn every `ms` while the tab is visible and no key is being asked for.
function poll(fn, ms) {
  const tick = async () => {
    if (!document.hidden && !state.asking) {
      try { await fn(); } catch (e) { if (!(e instanceof KeyNeeded || e instanceof Loading)) console.debug(e); }
    }
    setTimeout(tick, ms);
  };
  tick();
}

// ---- memory: one bar per device ---------------------------------------------
const TERMS = ['weights', 'kv_cache', 'activations', 'runtime'];

async function refreshMemory() {
  const res = await api('/v1/memory');
  if (!res.ok) return;
  state.memory = await res.json();
  drawMemory();
}

function drawMemory() {
  const m = state.memory;
  const box = $('devices');
  box.replaceChildren();
  const names = Object.keys(m.devices || {});
  for (const name of names) {
    const d = m.devices[name];
    const terms = d.terms || {};
    const predicted = d.predicted || {};
    let reserved = 0;
    for (const t of TERMS) reserved += (terms[t] || {}).reserved_bytes || 0;
    // The budget applies to the plan's device: the only one, or the GPU of a split.
    const budgeted = names.length === 1 || name !== 'host';
    const budget = budgeted ? m.budget_bytes : 0;
    const scale = Math.max(budget, reserved, 1);
    const bar = el('div', { class: 'bar', 'data-device': name });
    const labels = el('div', { class: 'seg-label' });
    for (const t of TERMS) {
      const s = terms[t] || {};
      const r = s.reserved_bytes || 0;
      const seg = el('div', { class: 'seg', 'data-term': t, style: 'width:' + (100 * r / scale) + '%' });
      const color = 'var(--' + t + ')';
      seg.append(el('div', { class: 'reserved', style: 'background:' + color }));
      const alloc = r ? Math.min(1, (s.allocated_bytes || 0) / r) : 0;
      seg.append(el('div', { class: 'allocated', style: 'background:' + color + ';width:' + (100 * alloc) + '%' }));
      const peak = r ? Math.min(1, (s.peak_bytes || 0) / r) : 0;
      if (peak > 0 && peak < 1) seg.append(el('div', { class: 'peak', style: 'left:calc(' + (100 * peak) + '% - 1px)' }));
      seg.title = t + ' on ' + name + '\npredicted ' + bytes(predicted[t]) + '\nreserved ' + bytes(r) +
        '\nallocated ' + bytes(s.allocated_bytes) + '\npeak ' + bytes(s.peak_bytes);
      bar.append(seg);
      labels.append(el('span', { 'data-term': t }, t.replace('_', ' ') + ' ', el('b', {}, bytes(s.allocated_bytes)),
        ' of ' + bytes(r) + ' reserved (plan ' + bytes(predicted[t]) + ', peak ' + bytes(s.peak_bytes) + ')'));
    }
    const head = el('div', { class: 'device-head' }, el('b', {}, name),
      el('span', { class: 'hint' }, budgeted
        ? bytes(reserved) + ' reserved of a ' + bytes(budget) + ' budget, ' + bytes(Math.max(0, budget - reserved)) + ' left'
        : bytes(reserved) + ' reserved'));
    box.append(el('div', { class: 'device' }, head, bar, labels));
  }
  const rss = m.rss_bytes ? 'process RSS ' + bytes(m.rss_bytes) : '';
  const shared = m.kv_sharing && m.kv_sharing.bytes_saved
    ? ' · sharing saves ' + bytes(m.kv_sharing.bytes_saved) + ' of KV now' : '';
  box.append(el('p', { class: 'hint' }, rss + shared));
}

// ---- KV blocks: one canvas per pool -----------------------------------------
async function refreshBlocks() {
  const q = state.selected ? '?detail=' + state.selected : '';
  const res = await api('/v1/memory/blocks' + q);
  if (!res.ok) return;
  const b = await res.json();
  const rose = state.preemptions != null && b.preemptions > state.preemptions;
  state.preemptions = b.preemptions;
  state.blocks = b;
  drawBlocks();
  drawRequests(b);
  drawDetail(b);
  if (rose) for (const p of document.querySelectorAll('.pool')) flash(p);
}

function flash(node) {
  node.classList.remove('flash');
  void node.offsetWidth;  // restart the animation
  node.classList.add('flash');
}

function drawBlocks() {
  const b = state.blocks;
  const box = $('pools');
  const totals = { f: 0, o: 0, s: 0, c: 0 };
  while (box.children.length < b.pools.length) {
    const canvas = el('canvas', { 'aria-label': 'KV block map' });
    const title = el('div', { class: 'hint' });
    const pool = el('div', { class: 'pool' }, title, canvas);
    canvas.addEventListener('mousemove', (e) => hover(e, pool));
    canvas.addEventListener('mouseleave', () => { $('block-tip').hidden = true; });
    canvas.addEventListener('click', (e) => clickCell(e, pool));
    box.append(pool);
  }
  while (box.children.length > b.pools.length) box.lastChild.remove();
  const colors = { f: css('--block-f'), o: css('--block-o'), s: css('--block-s'), c: css('--block-c') };
  const select = css('--select');
  state.grids = [];
  b.pools.forEach((p, i) => {
    const pool = box.children[i];
    pool.dataset.index = i;
    const canvas = pool.querySelector('canvas');
    const n = p.n_blocks;
    const width = Math.max(100, pool.clientWidth);
    // Cells as large as fit in about 420 px of height, 3 to 16 px.
    const cell = Math.max(3, Math.min(16, Math.floor(Math.sqrt((width * 420) / Math.max(1, n)))));
    const cols = Math.max(1, Math.floor(width / cell));
    const rows = Math.ceil(n / cols);
    const dpr = window.devicePixelRatio || 1;
    canvas.style.height = rows * cell + 'px';
    canvas.style.width = cols * cell + 'px';
    canvas.width = Math.round(cols * cell * dpr);
    canvas.height = Math.round(rows * cell * dpr);
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const gap = cell >= 6 ? 1 : 0;
    for (const k of Object.keys(colors)) {
      ctx.fillStyle = colors[k];
      for (let j = 0; j < n; ++j) {
        if (p.state[j] !== k) continue;
        ctx.fillRect((j % cols) * cell, Math.floor(j / cols) * cell, cell - gap, cell - gap);
      }
    }
    for (const k of 'fosc') totals[k] += p.counts[{ f: 'free', o: 'owned', s: 'shared', c: 'cached' }[k]];
    if (state.selected) {
      ctx.strokeStyle = select;
      ctx.lineWidth = 1;
      for (let j = 0; j < n; ++j) {
        if (p.owner[j] !== state.selected) continue;
        ctx.strokeRect((j % cols) * cell + 0.5, Math.floor(j / cols) * cell + 0.5, cell - gap - 1, cell - gap - 1);
      }
    }
    pool.firstChild.textContent = p.name + ': ' + count(n) + ' blocks of ' + b.block_size + ' tokens, ' +
      bytes(p.block_bytes) + ' each';
    state.grids.push({ canvas, cols, cell, n });
  });
  for (const k of 'fosc') $('count-' + k).textContent = count(totals[k]);
  $('block-meta').textContent = 'snapshot ' + b.version + ', ' + Math.round(b.age_ms) + ' ms old · ' +
    count(b.preemptions) + ' preemptions so far';
}

function cellAt(e, pool) {
  const g = state.grids[Number(pool.dataset.index)];
  if (!g) return null;
  const r = g.canvas.getBoundingClientRect();
  const col = Math.floor((e.clientX - r.left) / g.cell);
  const row = Math.floor((e.clientY - r.top) / g.cell);
  const j = row * g.cols + col;
  if (col < 0 || col >= g.cols || j < 0 || j >= g.n) return null;
  return { pool: state.blocks.pools[Number(pool.dataset.index)], j };
}

const STATE_TEXT = { f: 'free', o: 'owned', s: 'shared', c: 'cached prefix (evictable)' };

function hover(e, pool) {
  const c = cellAt(e, pool);
  const tip = $('block-tip');
  if (!c) { tip.hidden = true; return; }
  const owner = c.pool.owner[c.j];
  const r = owner ? state.blocks.requests.find((x) => x.id === owner) : null;
  tip.textContent = 'block ' + c.j + ': ' + STATE_TEXT[c.pool.state[c.j]] +
    (owner ? '\nrequest ' + owner + (r ? ' (' + r.state + ', ' + r.prompt_tokens + ' + ' + r.output_tokens + ' tokens)' : '') +
      '\nclick for its tokens and block table' : '');
  tip.style.left = Math.min(window.innerWidth - 330, e.clientX + 14) + 'px';
  tip.style.top = e.clientY + 14 + 'px';
  tip.hidden = false;
}

function clickCell(e, pool) {
  const c = cellAt(e, pool);
  select(c && c.pool.owner[c.j] ? c.pool.owner[c.j] : 0);
}

function select(id) {
  state.selected = id;
  if (state.blocks) { drawBlocks(); drawRequests(state.blocks); drawDetail(state.blocks); }
  refreshBlocks().catch(() => {});
}

function drawDetail(b) {
  const box = $('detail');
  if (!state.selected) { box.hidden = true; return; }
  box.hidden = false;
  const r = b.requests.find((x) => x.id === state.selected);
  const close = el('button', { type: 'button' }, 'close');
  close.addEventListener('click', () => select(0));
  if (!r) {
    box.replaceChildren(el('p', {}, 'Request ' + state.selected + ' has finished: its blocks are free or cached. '), close);
    return;
  }
  const parts = [el('p', {}, el('b', {}, 'request ' + r.id), ' · ' + r.state + ' · ' + r.prompt_tokens + ' prompt tokens (' +
    r.cached_tokens + ' from the prefix cache) · ' + r.output_tokens + ' generated · ' + r.blocks + ' blocks · ' +
    r.preemptions + ' preemptions ', close)];
  const d = b.detail;
  if (d && d.id === r.id && d.found) {
    const tokens = el('div', { class: 'tokens' });
    d.pieces.forEach((piece, i) => {
      tokens.append(el('span', { class: 't' + (i < r.prompt_tokens ? ' prompt' : ''), title: 'position ' + i + ', token ' + d.tokens[i] }, piece));
    });
    parts.push(el('div', { class: 'hint' }, 'tokens (prompt in grey; hover one for its id):'), tokens);
  }
  for (const s of r.sequences) {
    const tables = s.block_tables.map((t, g) => (b.pools.length > 1 ? b.pools[g].name + ': ' : '') + '[' + t.join(', ') + ']');
    parts.push(el('p', {}, 'sequence ' + s.index + ': ' + s.tokens + ' tokens, K/V computed for ' + s.computed +
      '; block table ', el('code', {}, tables.join('; '))));
  }
  box.replaceChildren(...parts);
}

// ---- requests ------------------------------------------------------------------
function drawRequests(b) {
  const body = $('request-rows');
  body.replaceChildren();
  for (const r of b.requests) {
    const tr = el('tr', { class: r.state, 'data-id': r.id },
      el('td', {}, String(r.id)), el('td', {}, r.state), el('td', {}, count(r.prompt_tokens)),
      el('td', {}, count(r.cached_tokens)), el('td', {}, count(r.output_tokens)), el('td', {}, count(r.blocks)),
      el('td', {}, r.ttft_s == null ? '–' : Math.round(r.ttft_s * 1000) + ' ms'),
      el('td', {}, r.tokens_per_s ? r.tokens_per_s.toFixed(1) : '–'), el('td', {}, String(r.preemptions)));
    if (r.id === state.selected) tr.classList.add('selected');
    const before = state.rowPreemptions.get(r.id);
    if (before != null && r.preemptions > before) flash(tr);
    state.rowPreemptions.set(r.id, r.preemptions);
    tr.addEventListener('click', () => select(r.id === state.selected ? 0 : r.id));
    body.append(tr);
  }
  const running = b.requests.filter((r) => r.state === 'running').length;
  $('request-summary').textContent = running + ' running, ' + (b.requests.length - running) + ' waiting';
}

// ---- charts ----------------------------------------------------------------------
async function refreshHistory() {
  const res = await api('/v1/memory/history');
  if (!res.ok) return;
  state.history = await res.json();
  drawCharts();
}

function series(samples, f) {
  const out = [];
  for (let i = 1; i < samples.length; ++i) out.push([samples[i].t_s, f(samples, i)]);
  return out;
}

function drawCharts() {
  const s = state.history.samples;
  const rate = (a, i) => (a[i].generation_tokens - a[i - 1].generation_tokens) / Math.max(1e-9, a[i].t_s - a[i - 1].t_s);
  const kv = (a, i) => (a[i].kv_blocks_total ? (100 * a[i].kv_blocks_used) / a[i].kv_blocks_total : 0);
  // The hit rate over the last 10 samples, so a quiet second is not a gap.
  const hit = (a, i) => {
    const j = Math.max(0, i - 10);
    const q = a[i].prefix_query_tokens - a[j].prefix_query_tokens;
    return q > 0 ? (100 * (a[i].prefix_hit_tokens - a[j].prefix_hit_tokens)) / q : null;
  };
  chart($('chart-throughput'), series(s, rate), null);
  chart($('chart-kv'), series(s, kv), 100);
  chart($('chart-hit'), series(s, hit), 100);
}

function chart(canvas, points, fixedMax) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 300;
  const h = canvas.clientHeight || 90;
  canvas.width = Math.round(w * dpr);
  canvas.height = Math.round(h * dpr);
  const ctx = canvas.getContext('2d');
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  const values = points.map((p) => p[1]).filter((v) => v != null);
  const max = fixedMax || Math.max(1, ...values) * 1.15;
  const t1 = points.length ? points[points.length - 1][0] : 0;
  const t0 = t1 - 300;
  ctx.strokeStyle = css('--line');
  ctx.beginPath(); ctx.moveTo(0, h - 0.5); ctx.lineTo(w, h - 0.5); ctx.stroke();
  ctx.strokeStyle = css('--weights');
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  let pen = false;
  for (const [t, v] of points) {
    if (v == null) { pen = false; continue; }
    const x = ((t - t0) / 300) * w;
    const y = h - 2 - (v / max) * (h - 14);
    if (pen) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    pen = true;
  }
  ctx.stroke();
  ctx.fillStyle = css('--muted');
  ctx.font = '11px system-ui, sans-serif';
  const last = values.length ? values[values.length - 1] : null;
  ctx.fillText('now ' + (last == null ? '–' : last.toFixed(1)) + ' · max ' + (fixedMax ? fixedMax : (max / 1.15).toFixed(1)) + ' · 5 min', 4, 11);
}

// ---- chat ------------------------------------------------------------------------
const chat = { messages: [], controller: null };

function addMessage(role, text) {
  const m = el('div', { class: 'msg ' + role });
  const body = el('span', { class: 'text' }, text);
  m.append(body);
  $('chat-log').append(m);
  $('chat-log').scrollTop = $('chat-log').scrollHeight;
  return { m, body };
}

async function send(text) {
  chat.messages.push({ role: 'user', content: text });
  addMessage('user', text);
  const { m, body } = addMessage('assistant', '');
  const stats = el('span', { class: 'stats' }, 'waiting for the first token…');
  m.append(stats);
  chat.controller = new AbortController();
  $('chat-send').textContent = 'Stop';
  const t0 = performance.now();
  let tFirst = null;
  let reply = '';
  let usage = null;
  let pieces = 0;
  try {
    const res = await api('/v1/chat/completions', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({
        model: state.model, messages: chat.messages, stream: true,
        stream_options: { include_usage: true }, max_tokens: Number($('chat-max-tokens').value) || 128,
      }),
      signal: chat.controller.signal,
    });
    if (!res.ok) {
      const err = await res.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || 'HTTP ' + res.status);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data: ')) continue;
          const data = line.slice(6);
          if (data === '[DONE]') continue;
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(chunk.error.message);
          if (chunk.usage) usage = chunk.usage;
          for (const c of chunk.choices || []) {
            const piece = c.delta && c.delta.content;
            if (!piece) continue;
            if (tFirst == null) tFirst = performance.now();
            reply += piece;
            ++pieces;
            body.textContent = reply;
            stats.textContent = pieces + ' pieces so far';
            $('chat-log').scrollTop = $('chat-log').scrollHeight;
          }
        }
      }
    }
    chat.messages.push({ role: 'assistant', content: reply });
    const t1 = performance.now();
    const n = usage ? usage.completion_tokens : pieces;
    const speed = tFirst != null && n > 1 && t1 > tFirst ? ((n - 1) * 1000) / (t1 - tFirst) : null;
    stats.textContent = n + ' tokens' + (speed ? ' · ' + speed.toFixed(1) + ' tokens/s' : '') +
      (tFirst != null ? ' · first token after ' + Math.round(tFirst - t0) + ' ms' : '') +
      (usage && usage.kv_blocks != null ? ' · ' + usage.kv_blocks + ' KV blocks' : '') +
      (usage ? ' · prompt ' + usage.prompt_tokens + ' tokens' : '');
    m.dataset.done = 'true';
  } catch (e) {
    if (e.name === 'AbortError') {
      stats.textContent = 'stopped';
      if (reply) chat.messages.push({ role: 'assistant', content: reply });
    } else {
      chat.messages.pop();
      m.classList.add('error');
      body.textContent = e instanceof KeyNeeded ? 'The server wants an API key.' : String(e.message || e);
      stats.textContent = '';
    }
    m.dataset.done = 'true';
  } finally {
    chat.controller = null;
    $('chat-send').textContent = 'Send';
  }
}

$('chat-form').addEventListener('submit', (e) => {
  e.preventDefault();
  if (chat.controller) { chat.controller.abort(); return; }
  const text = $('chat-input').value.trim();
  if (!text) return;
  $('chat-input').value = '';
  send(text);
});
$('chat-input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); $('chat-form').requestSubmit(); }
});
$('chat-clear').addEventListener('click', () => {
  chat.messages = [];
  $('chat-log').replaceChildren();
});

// ---- start -------------------------------------------------------------------------
async function refreshModel() {
  if (state.model) return;
  const res = await api('/v1/models');
  if (!res.ok) return;
  const j = await res.json();
  state.model = j.data[0].id;
  $('model').textContent = state.model;
  setStatus('live', 'live');
}

function refreshAll() {
  refreshModel().catch(() => {});
  refreshMemory().catch(() => {});
  refreshBlocks().catch(() => {});
  refreshHistory().catch(() => {});
}

window.addEventListener('resize', () => { if (state.blocks) drawBlocks(); if (state.history) drawCharts(); });
window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', refreshAll);
document.addEventListener('visibilitychange', () => { if (!document.hidden) refreshAll(); });
// For tests and for people poking at it from the console: the last data and the grids' geometry.
window.headroomPage = { state };

poll(refreshModel, 2000);
poll(refreshMemory, 1000);
poll(refreshBlocks, 500);
poll(refreshHistory, 2000);
