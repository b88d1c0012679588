// What a conversation does in the background: its runs (status, model, tokens, timing), its
// tasks (state, duration, exit, and for the owner the output), its children as a tree with each
// request's relay status, and its signals. Each panel reads the same HTTP API as any client.

import { get, post, session, words } from './api.js';
import {
  ago, badge, button, conversationRoute, duration, h, link, replace, short, table,
} from './dom.js';

const base = (id) => `/v1/conversations/${encodeURIComponent(id)}`;
const OPEN = new Set(['queued', 'running', 'awaiting_approval']);

function tokens(usage) {
  if (!usage || !usage.model_calls) return h('span', { class: 'muted' }, '—');
  const cached = usage.cache_read_tokens ? ` (${usage.cache_read_tokens} cached)` : '';
  return h('span', { title: `${usage.model_calls} model call(s)` },
    `${usage.input_tokens} in${cached} · ${usage.output_tokens} out`);
}

// -- runs ------------------------------------------------------------------------------------

export async function runsPanel(conversationId, context, models) {
  const { items } = await get(`${base(conversationId)}/runs`);
  const rows = [...items].reverse().map((run) => {
    const took = run.started_at_us && run.ended_at_us
      ? duration((run.ended_at_us - run.started_at_us) / 1000) : null;
    const actions = [];
    if (run.status === 'failed' || run.status === 'needs_attention') {
      const choice = h('select', { class: 'retry-model', 'aria-label': 'model to retry with' },
        h('option', { value: '' }, 'its own model'),
        models.map((m) => h('option', { value: m }, m)));
      actions.push(choice, button('Retry', async () => {
        try {
          await post(`${base(conversationId)}/runs/${encodeURIComponent(run.run_id)}/retry`,
            choice.value ? { model: choice.value } : {});
          context.notify('Retry accepted: it enters as your input.');
        } catch (error) {
          context.failed(error);
        }
      }, { class: 'retry', dataset: { run: run.run_id } }));
    }
    if (OPEN.has(run.status) || run.status === 'completed') {
      actions.push(button(OPEN.has(run.status) ? 'Stop' : 'Stop its mail', async () => {
        try {
          const { cancelled_inputs: cancelled } = await post(
            `${base(conversationId)}/runs/${encodeURIComponent(run.run_id)}/stop`);
          context.notify(`Stopped; ${cancelled.length} queued input(s) withdrawn.`);
        } catch (error) {
          context.failed(error);
        }
      }, { class: 'stop-run', dataset: { run: run.run_id } }));
    }
    return h('tr', { dataset: { run: run.run_id, status: run.status } },
      h('td', { title: run.run_id }, short(run.run_id), h('div', { class: 'id' }, run.trigger)),
      h('td', {}, badge(run.status),
        run.failure_code ? h('div', { class: 'failure' }, run.failure_code) : null),
      h('td', {}, run.model || '—'),
      h('td', {}, String(run.steps)),
      h('td', {}, tokens(run.usage)),
      h('td', {}, ago(run.started_at_us || run.created_at_us)),
      h('td', {}, took || (OPEN.has(run.status) ? 'running' : '—')),
      h('td', { class: 'actions' }, actions));
  });
  return table(['Run', 'Status', 'Model', 'Steps', 'Tokens', 'Started', 'Took', ''], rows,
    'No runs yet.');
}

// -- tasks -----------------------------------------------------------------------------------

function outputViewer(conversationId, task, context) {
  const holder = h('div', { class: 'output' });
  let offset = 0;
  const page = h('pre', { class: 'output-page' });
  const status = h('div', { class: 'muted' });
  const nextButton = button('Next page', () => show(), { class: 'next-page' });

  async function show() {
    try {
      const result = await get(`${base(conversationId)}/results/${encodeURIComponent(
        task.result_id)}?offset=${offset}&limit_bytes=16384`);
      page.textContent = result.text;
      const end = result.next_offset === null ? result.size_bytes : result.next_offset;
      status.textContent = `bytes ${result.offset}–${end} of ${result.size_bytes}`
        + (result.status === 'truncated' ? ' · truncated: ' + result.dropped.map(
          (d) => d.statement).join('; ') : '');
      offset = result.next_offset === null ? 0 : result.next_offset;
      nextButton.textContent = result.next_offset === null ? 'From the start' : 'Next page';
      const paged = result.next_offset !== null || result.offset > 0;
      replace(holder, status, page, paged ? nextButton : null);
    } catch (error) {
      replace(holder, h('p', { class: 'error' }, words(error)));
      if (error.code === 'unauthorized') context.failed(error);
    }
  }
  return { holder, show };
}

export async function tasksPanel(conversationId, context) {
  const { items } = await get(`${base(conversationId)}/tasks?limit=100`);
  const owner = Boolean(session.who.principal);
  const rows = items.map((task) => {
    const exit = task.exit_code !== null ? `exit ${task.exit_code}`
      : task.signal ? `signal ${task.signal}` : '—';
    let output = null;
    if (task.result_id && owner) {
      const viewer = outputViewer(conversationId, task, context);
      output = h('div', {}, button('Output', () => viewer.show(),
        { class: 'show-output', dataset: { task: task.task_key } }), viewer.holder);
    } else if (task.result_id) {
      output = h('span', { class: 'muted' }, 'output: its owner\'s');
    }
    return h('tr', { dataset: { task: task.task_key, state: task.state } },
      h('td', {}, task.task_key, h('div', { class: 'id' }, task.lifetime)),
      h('td', {}, h('code', {}, task.command)),
      h('td', {}, badge(task.state),
        task.delivered ? h('div', { class: 'id' }, task.consumed ? 'notice read'
          : 'notice delivered') : null),
      h('td', {}, exit),
      h('td', {}, task.duration_ms !== null ? duration(task.duration_ms)
        : (task.state === 'running' ? 'running' : '—')),
      h('td', {}, ago(task.started_at_us)),
      h('td', { class: 'excerpt' }, task.excerpt ? h('pre', {}, task.excerpt) : null, output));
  });
  return table(['Task', 'Command', 'State', 'Exit', 'Took', 'Started', 'Output'], rows,
    'No background tasks.');
}

// -- children --------------------------------------------------------------------------------

function relay(request) {
  if (request.state === 'cancelled') return 'cancelled';
  if (request.consumed_in_run) return 'consumed in its run';
  if (request.relayed) return 'relayed';
  if (request.state === 'replied') return 'replied, relay pending';
  return 'waiting for the reply';
}

async function childNodes(conversationId, depth, seen) {
  const { items } = await get(`${base(conversationId)}/children?limit=100`);
  const nodes = [];
  for (const request of items) {
    const child = request.child_conversation_id;
    let below = null;
    if (depth < 4 && !seen.has(child)) {
      seen.add(child);
      try {
        below = await childNodes(child, depth + 1, seen);
      } catch {
        below = null;
      }
    }
    nodes.push(h('li', { class: 'child', dataset: { child } },
      h('div', { class: 'request' },
        h('span', { class: 'kind' }, request.kind), ' ',
        link(conversationRoute(child), short(child)), ' ',
        badge(request.state), ' ',
        h('span', { class: 'relay' }, relay(request)),
        request.reply_status ? h('span', { class: 'muted' }, ` · reply ${request.reply_status}`)
          : null,
        h('span', { class: 'id' }, ` ${request.task_key}`)),
      below && below.childElementCount ? below : null));
  }
  return h('ul', { class: 'tree' }, nodes);
}

export async function childrenPanel(conversationId) {
  const tree = await childNodes(conversationId, 0, new Set([conversationId]));
  return tree.childElementCount ? tree
    : h('p', { class: 'muted empty' }, 'This conversation opened no child conversations.');
}

// -- signals ---------------------------------------------------------------------------------

export async function signalsPanel(conversationId) {
  const [stats, letters] = await Promise.all([
    get(`${base(conversationId)}/signals/stats`),
    get(`${base(conversationId)}/dead-letters`),
  ]);
  return h('div', {},
    h('dl', { class: 'stats' },
      h('dt', {}, 'backlog'), h('dd', {}, String(stats.backlog)),
      h('dt', {}, 'ready'), h('dd', {}, String(stats.ready)),
      h('dt', {}, 'leased'), h('dd', {}, String(stats.leased)),
      h('dt', {}, 'oldest'), h('dd', {}, stats.oldest_age_us === null ? '—'
        : duration(stats.oldest_age_us / 1000)),
      h('dt', {}, 'dead letters'), h('dd', {}, String(stats.dead_letters))),
    table(['Delivery', 'Type', 'Attempts', 'Failure'], letters.items.map((d) => h('tr', {},
      h('td', {}, String(d.delivery_id)), h('td', {}, d.type), h('td', {}, String(d.attempts)),
      h('td', {}, d.failure_code))), 'No dead letters.'));
}
