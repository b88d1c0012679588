// The transcript of one conversation, built from its feed alone: committed messages in order,
// the answers being written (drafts) below them, and the inputs waiting to be read below
// those. Everything anyone wrote -- a person, the model, a tool, a process, a child -- enters
// the page as text. The runtime's own words are marked as the runtime's, never as a person's.

import { h, put } from './dom.js';

const FINAL = new Set(['completed', 'failed', 'needs_attention', 'stopped']);

const NOTICE_KINDS = {
  task_result: 'background task notice',
  child: 'reply from a child conversation',
  agent: 'message from another agent',
};

const ENTITIES = { lt: '<', gt: '>', amp: '&', quot: '"', apos: "'" };

// The escaped text of a child's reply, unescaped as text (never parsed as markup).
function unescapeText(text) {
  return text.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|[a-z]+);/g, (whole, name) => {
    if (name[0] === '#') {
      const code = name[1] === 'x' ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10);
      return Number.isFinite(code) && code > 0 && code <= 0x10ffff
        ? String.fromCodePoint(code) : whole;
    }
    return ENTITIES[name] === undefined ? whole : ENTITIES[name];
  });
}

function fold(text, limit = 140) {
  const lines = text.trim().split(/\r?\n/);
  let first = lines[0] || '';
  if (first.length > limit) first = first.slice(0, limit - 1) + '…';
  else if (lines.length > 1) first += ' …';
  return first;
}

// One line for the runtime's own words: a task's notice, a child's reply, or its first line.
export function noticeSummary(content) {
  const facts = /<process_facts>([\s\S]*?)<\/process_facts>/.exec(content);
  if (facts) {
    try {
      const seen = JSON.parse(facts[1]);
      let line = `task ${seen.task_key || '?'} ${seen.state || 'ended'}`;
      const how = [];
      if (seen.exit_code !== null && seen.exit_code !== undefined) how.push(`exit ${seen.exit_code}`);
      else if (seen.signal) how.push(`signal ${seen.signal}`);
      if (typeof seen.duration_ms === 'number') how.push(`${(seen.duration_ms / 1000).toFixed(1)} s`);
      if (how.length) line += ` (${how.join(', ')})`;
      const output = /<untrusted_process_output[^>]*>([\s\S]*?)<\/untrusted_process_output>/
        .exec(content);
      if (output) {
        const text = JSON.parse(output[1]);
        if (typeof text === 'string' && text.trim()) line += ': ' + fold(text);
      }
      return line;
    } catch {
      // not the runtime's facts after all: fall through
    }
  }
  const child = /^<task_result task="([^"]*)" status="([^"]*)" conversation="([^"]*)">([\s\S]*)<\/task_result>$/
    .exec(content.trim());
  if (child) {
    const body = unescapeText(child[4]);
    return `child ${unescapeText(child[3])} (${unescapeText(child[1])}) ${child[2]}`
      + (body.trim() ? ': ' + fold(body) : '');
  }
  return fold(content);
}

function amount(value) {
  return typeof value === 'number' ? String(Math.round(value * 100) / 100) : String(value);
}

// A call's progress in words: "3/10 — message" (the server's message, as text).
export function progressWords(data) {
  const done = amount(data.progress) + (data.total === null || data.total === undefined ? ''
    : '/' + amount(data.total));
  return data.message ? `${done} — ${data.message}` : done;
}

function time(us) {
  return h('time', { class: 'at' }, new Date(us / 1000).toLocaleTimeString());
}

function preview(value) {
  const text = JSON.stringify(value);
  return text.length > 80 ? text.slice(0, 79) + '…' : text;
}

export class TranscriptView {
  constructor() {
    this.messages = h('div', { class: 'messages', id: 'messages' });
    this.reading = h('div', { class: 'reading', id: 'reading' });
    this.drafts = h('div', { class: 'drafts', id: 'drafts' });
    this.pending = h('div', { class: 'pending', id: 'pending' });
    // Committed messages; the inputs the running turn is answering (they are written to the
    // transcript with its answer); the answers being written; the inputs still waiting.
    this.el = h('div', { class: 'transcript', id: 'transcript' },
      this.messages, this.reading, this.drafts, this.pending);
    this.calls = new Map(); // call_id -> { details, result, state, bar }
    this.progress = new Map(); // call_id -> the newest mcp_progress data of a running call
    this.draftsByKey = new Map(); // `${run}:${step}` -> { el, text: Text }
    this.pendingById = new Map(); // input_id -> element
    this.authors = new Map(); // input_id -> authored_by, as its input_accepted said
    this.owner = null; // the conversation's owner: a person's words by anyone else are marked
    this.lastSeq = 0;
  }

  // Keeps the newest in view when the reader is already at the bottom.
  follow(action) {
    const scroller = document.scrollingElement;
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 80;
    action();
    if (atBottom) scroller.scrollTop = scroller.scrollHeight;
  }

  handle(event) {
    const data = event.data || {};
    if (event.seq !== null && event.seq !== undefined) {
      this.lastSeq = event.seq;
      this.el.dataset.lastSeq = String(event.seq);
    }
    switch (event.type) {
      case 'message_delta': this.follow(() => this.delta(data)); break;
      case 'message_discarded': this.dropDraft(`${data.run_id}:${data.step}`); break;
      case 'message_committed': this.follow(() => this.committed(data, event.at_us)); break;
      case 'input_accepted': this.follow(() => this.accepted(data, event.at_us)); break;
      case 'input_materialized': this.unpend(data.input_id); break;
      case 'input_cancelled':
        for (const id of data.input_ids || []) this.withdrawn(id);
        break;
      case 'turn_status':
        if (FINAL.has(data.status)) this.dropRun(event.run_id || data.run_public_id);
        else if (data.status === 'running') this.read(data.inputs || []);
        break;
      case 'mcp_progress': this.progressed(data); break;
      case 'context_compacted': this.line('The history was compacted.', event.at_us); break;
      case 'context_trimmed':
        this.line('The history sent to the model was cut to fit its window.', event.at_us);
        break;
      case 'restart_accepted': this.line('A restart was accepted.', event.at_us); break;
      case 'restart_completed': this.line('The restart completed.', event.at_us); break;
      case 'conversation_status':
        this.line(`The conversation was ${data.status}.`, event.at_us);
        break;
      default: break;
    }
  }

  line(text, at) {
    this.messages.append(h('div', { class: 'event-line runtime' },
      h('span', { class: 'who' }, 'runtime'), ' ', text, ' ', time(at)));
  }

  // -- drafts: the answer being written --------------------------------------------------------

  delta(data) {
    const key = `${data.run_id}:${data.step}`;
    let draft = this.draftsByKey.get(key);
    if (!draft) {
      const text = document.createTextNode('');
      const el = h('article', { class: 'msg assistant draft', dataset: { run: data.run_id } },
        h('header', {}, h('span', { class: 'who' }, 'assistant'),
          h('span', { class: 'kind' }, 'writing…')),
        h('div', { class: 'text' }, text));
      draft = { el, text };
      this.draftsByKey.set(key, draft);
      this.drafts.append(el);
    }
    const have = draft.text.length;
    if (data.offset === have) draft.text.appendData(data.text);
    else draft.text.data = draft.text.data.slice(0, data.offset) + data.text;
  }

  dropDraft(key) {
    const draft = this.draftsByKey.get(key);
    if (draft) {
      draft.el.remove();
      this.draftsByKey.delete(key);
    }
  }

  dropRun(runId) {
    for (const key of [...this.draftsByKey.keys()]) {
      if (key.startsWith(`${runId}:`)) this.dropDraft(key);
    }
  }

  // -- inputs waiting to be read ---------------------------------------------------------------

  // Who wrote a person's input: the owner ('person'), or someone else who posted into the
  // conversation -- an operator -- named as such. An input posted without an author (through
  // the library, as "person") is the owner's.
  author(inputId) {
    const by = this.authors.get(inputId);
    if (!by || !this.owner || !by.display_name || by.handle === this.owner) return null;
    return by.handle;
  }

  personHeader(inputId, ...rest) {
    const other = this.author(inputId);
    return h('header', {}, h('span', { class: 'who' }, other || 'person'),
      other ? h('span', { class: 'aside' }, `posted by ${other === 'operator' ? 'an operator'
        : other}, not by the owner (${this.owner})`) : null,
      ...rest);
  }

  accepted(data, at) {
    if (data.authored_by) this.authors.set(data.input_id, data.authored_by);
    if (this.pendingById.has(data.input_id)) return;
    const runtime = Boolean(data.by_runtime);
    const other = !runtime && this.author(data.input_id);
    const kind = h('span', { class: 'kind' }, runtime
      ? (NOTICE_KINDS[data.origin] || 'notice') + ', waiting'
      : (data.delivery_mode === 'steer' ? 'steering, waiting' : 'waiting for a turn'));
    const el = h('article', { class: 'msg pending-input ' + (runtime ? 'runtime' : 'person')
      + (other ? ' by-other' : ''), dataset: { input: data.input_id } },
    runtime ? h('header', {}, h('span', { class: 'who' }, 'runtime'), kind, time(at))
      : this.personHeader(data.input_id, kind, time(at)),
    h('div', { class: 'text' }, data.content === undefined ? '' : String(data.content)));
    this.pendingById.set(data.input_id, el);
    this.pending.append(el);
  }

  // The running turn took these inputs: they show above its answer, as being answered.
  read(inputIds) {
    for (const id of inputIds) {
      const el = this.pendingById.get(id);
      if (!el) continue;
      el.classList.add('being-read');
      const kind = el.querySelector('.kind');
      if (kind) kind.textContent = 'being answered';
      this.reading.append(el);
    }
  }

  unpend(inputId) {
    const el = this.pendingById.get(inputId);
    if (el) {
      el.remove();
      this.pendingById.delete(inputId);
    }
  }

  withdrawn(inputId) {
    const el = this.pendingById.get(inputId);
    if (el) {
      el.classList.add('withdrawn');
      const kind = el.querySelector('.kind');
      if (kind) kind.textContent = 'withdrawn';
      this.pendingById.delete(inputId);
    }
  }

  // -- committed messages ----------------------------------------------------------------------

  committed(data, at) {
    const m = data.message;
    if (!m) return;
    if (m.input_id) this.unpend(m.input_id);
    if (m.role === 'assistant' && m.run_id !== null) this.dropDraft(`${m.run_id}:${m.step}`);
    if (m.role === 'tool') {
      this.result(m, at);
      return;
    }
    this.messages.append(this.message(m, Boolean(data.by_runtime), at));
  }

  message(m, byRuntime, at) {
    if (m.role === 'user' && byRuntime) {
      return h('article', { class: 'msg runtime notice', dataset: { seq: m.seq,
        origin: m.origin || 'runtime' } },
      h('header', {}, h('span', { class: 'who' }, 'runtime'),
        h('span', { class: 'kind' }, NOTICE_KINDS[m.origin] || 'notice'),
        h('span', { class: 'aside' }, 'written by the runtime, not by a person'), time(at)),
      h('div', { class: 'summary' }, noticeSummary(m.content)),
      h('details', { class: 'notice-body' }, h('summary', {}, 'as the model reads it'),
        h('pre', { class: 'text' }, m.content)));
    }
    if (m.role === 'user') {
      const other = this.author(m.input_id);
      return h('article', { class: 'msg person' + (other ? ' by-other' : ''),
        dataset: other ? { seq: m.seq, author: other } : { seq: m.seq } },
      this.personHeader(m.input_id, time(at)),
      h('div', { class: 'text' }, m.content));
    }
    const el = h('article', { class: 'msg assistant', dataset: { seq: m.seq, run: m.run_id } },
      h('header', {}, h('span', { class: 'who' }, 'assistant'), time(at)));
    if (m.content) put(el, h('div', { class: 'text' }, m.content));
    for (const call of m.tool_calls || []) put(el, this.call(call));
    return el;
  }

  // A running MCP call's progress, on its call: a bar (when the server gave a total) and the
  // server's words.
  progressed(data) {
    this.progress.set(data.call_id, data);
    const call = this.calls.get(data.call_id);
    if (!call || call.details.classList.contains('answered')) return;
    call.state.textContent = progressWords(data);
    call.state.dataset.progress = String(data.progress);
    if (typeof data.total === 'number' && data.total > 0) {
      call.bar.max = data.total;
      call.bar.value = Math.min(data.progress, data.total);
      call.bar.hidden = false;
    }
  }

  call(call) {
    const state = h('span', { class: 'tool-state' }, 'waiting for its result');
    const bar = h('progress', { class: 'call-progress', hidden: true });
    const result = h('pre', { class: 'result' }, '');
    const details = h('details', { class: 'tool', dataset: { call: call.call_id } },
      h('summary', {}, h('span', { class: 'tool-name' }, call.name), ' ',
        h('span', { class: 'args' }, preview(call.arguments)), ' ', bar, ' ', state),
      h('div', { class: 'tool-body' },
        h('div', { class: 'label' }, 'arguments'),
        h('pre', { class: 'arguments' }, JSON.stringify(call.arguments, null, 2)),
        h('div', { class: 'label' }, 'result'), result));
    this.calls.set(call.call_id, { details, result, state, bar });
    return details;
  }

  result(m, at) {
    let call = this.calls.get(m.tool_call_id);
    if (!call) { // its call is older than what this view read: show the result alone
      this.messages.append(this.call({ call_id: m.tool_call_id, name: m.tool_name || 'tool',
        arguments: {} }));
      call = this.calls.get(m.tool_call_id);
    }
    call.result.textContent = m.content;
    call.state.textContent = 'answered ' + new Date(at / 1000).toLocaleTimeString();
    call.bar.hidden = true;
    this.progress.delete(m.tool_call_id);
    call.details.classList.add('answered');
  }
}
