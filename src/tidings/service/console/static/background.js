// What a conversation does in the background: its runs (status, model, tokens, timing), its
// tasks (state, duration, exit, and for the owner the output), its children as a tree with each
// request's relay status (a remote child with its A2A agent, remote task and its state), and its
// signals. Each panel reads the same HTTP API as any client.

import { get, post, session, words } from './api.js';
import {
  ago, badge, button, conversationRoute, duration, failureWords, h, idCopy, link, replace, short,
  triggerWords,
} from './dom.js';
import { progressWords } from './transcript.js';

const base = (id) => `/v1/conversations/${encodeURIComponent(id)}`;
const OPEN = new Set(['queued', 'running', 'awaiting_approval']);

function tokens(usage) {
  if (!usage || !usage.model_calls) return h('span', { class: 'muted' }, '—');
  const cached = usage.cache_read_tokens ? ` (${usage.cache_read_tokens} cached)` : '';
  return h('span', { title: `${usage.model_calls} model call(s)` },
    `${usage.input_tokens} in${cached} · ${usage.output_tokens} out`);
}

// -- runs ------------------------------------------------------------------------------------

// The panels draw each item as a small card of wrapping lines, not as a wide table: the panel
// beside the transcript is narrow (a third of a 1024 px screen), and nothing in it may be cut.
function items(list, empty) {
  return list.length ? h('div', { class: 'items' }, list)
    : h('p', { class: 'muted empty' }, empty);
}

function facts(...parts) {
  return h('div', { class: 'line facts' },
    parts.filter(Boolean).map((part) => h('span', {}, part)));
}

export async function runsPanel(conversationId, context, models) {
  const { items: runs } = await get(`${base(conversationId)}/runs`);
  const cards = [...runs].reverse().map((run) => {
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
      // A finished run may still have children at work and inputs it queued: stopping it
      // cancels those (what it already wrote stays).
      const label = OPEN.has(run.status) ? 'Stop' : 'Cancel what it started';
      actions.push(button(label, async () => {
        try {
          const { cancelled_inputs: cancelled } = await post(
            `${base(conversationId)}/runs/${encodeURIComponent(run.run_id)}/stop`);
          context.notify(cancelled.length === 1 ? 'Stopped; 1 waiting input withdrawn.'
            : `Stopped; ${cancelled.length} waiting inputs withdrawn.`);
        } catch (error) {
          context.failed(error);
        }
      }, { class: 'stop-run', dataset: { run: run.run_id },
        title: OPEN.has(run.status) ? 'Stop this run now.'
          : 'Cancel the replies its children have not sent yet and the inputs it queued.' }));
    }
    const why = failureWords(run.failure_code, run.status);
    return h('div', { class: 'item run', dataset: { run: run.run_id, status: run.status } },
      h('div', { class: 'line' }, idCopy(run.run_id), badge(run.status),
        why ? h('span', { class: 'failure', title: run.failure_code }, why) : null),
      facts(triggerWords(run.trigger), run.model || null,
        run.steps === 1 ? '1 step' : `${run.steps} steps`, tokens(run.usage),
        'started ' + ago(run.started_at_us || run.created_at_us),
        took ? 'took ' + took : (OPEN.has(run.status) ? 'running' : null)),
      actions.length ? h('div', { class: 'line actions' }, actions) : null);
  });
  return items(cards, 'No runs yet.');
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

const LIFETIMES = {
  conversation: 'lives with the conversation',
  turn: 'lives with its turn',
};

// Whether the model has heard of the task's end yet, in words.
function noticeWords(task) {
  if (task.consumed) return 'the model has read its notice';
  if (task.delivered) return 'its notice is on its way to the model';
  if (task.reported_in_tool_result) return 'its end was told in the call\'s result';
  return null;
}

// progress: call_id -> the newest mcp_progress of a call still running (an MCP task's).
export async function tasksPanel(conversationId, context, progress) {
  const { items: tasks } = await get(`${base(conversationId)}/tasks?limit=100`);
  const owner = Boolean(session.who.principal);
  const cards = tasks.map((task) => {
    const exit = task.exit_code !== null ? `exit ${task.exit_code}`
      : task.signal ? `signal ${task.signal}` : null;
    let output = null;
    if (task.result_id && owner) {
      const viewer = outputViewer(conversationId, task, context);
      output = h('div', {}, button('Output', () => viewer.show(),
        { class: 'show-output', dataset: { task: task.task_key } }), viewer.holder);
    } else if (task.result_id) {
      output = h('span', { class: 'muted' }, 'its output is for its owner only');
    }
    const heard = noticeWords(task);
    return h('div', { class: 'item task', dataset: { task: task.task_key, state: task.state } },
      h('div', { class: 'line' }, idCopy(task.task_key, h('code', {}, task.task_key)),
        badge(task.state), exit ? h('span', {}, exit) : null,
        task.state === 'running' && progress && progress.has(task.call_id)
          ? h('span', { class: 'task-progress' }, progressWords(progress.get(task.call_id)))
          : null),
      h('div', { class: 'line' }, h('code', { class: 'command' }, task.command)),
      facts(LIFETIMES[task.lifetime] || task.lifetime, 'started ' + ago(task.started_at_us),
        task.duration_ms !== null ? 'took ' + duration(task.duration_ms)
          : (task.state === 'running' ? 'running' : null),
        heard ? h('span', { class: 'notice-state' }, heard) : null),
      task.excerpt ? h('div', { class: 'excerpt' }, h('pre', {}, task.excerpt)) : null,
      output);
  });
  return items(cards, 'No background tasks.');
}

// -- children --------------------------------------------------------------------------------

function relay(request, depth) {
  const to = depth ? 'its parent' : 'this conversation';
  if (request.state === 'cancelled') return 'cancelled';
  if (request.consumed_in_run) return `reply relayed to ${to} and read in the run that asked`;
  if (request.relayed) return `reply relayed to ${to}`;
  if (request.state === 'replied') return 'replied; the reply is being relayed';
  return 'waiting for the reply';
}

const KINDS = { spawn: 'opened with a request', send: 'a further request' };

function requestLine(request, who, depth) {
  return h('div', { class: 'request' },
    h('span', { class: 'kind' }, KINDS[request.kind] || request.kind), ' ', who, ' ',
    badge(request.state), ' ',
    h('span', { class: 'relay' }, relay(request, depth)),
    request.reply_status ? h('span', { class: 'muted' }, ` · its run ${
      String(request.reply_status).replace(/_/g, ' ')}`) : null);
}

// A remote child: a remote A2A agent answers it; its child conversation is only a handle.
function remoteNode(request, depth) {
  const child = request.child_conversation_id;
  return h('li', { class: 'child remote', dataset: { child, agent: request.agent } },
    requestLine(request, h('span', { class: 'agent', title: 'a remote A2A agent' },
      `A2A agent ${request.agent}`), depth),
    h('div', { class: 'remote-task' },
      'remote task ',
      request.remote_task_id ? idCopy(request.remote_task_id, h('span', {
        class: 'id remote-task-id' }, request.remote_task_id))
        : h('span', { class: 'muted' }, 'not answered yet'), ' ',
      request.remote_state ? h('span', { class: 'remote-state', dataset: {
        state: request.remote_state } }, request.remote_state) : null,
      ' · its handle here ', idCopy(child, link(conversationRoute(child), short(child)))));
}

// A conversation's children, each with its own children nested below it (a few levels down).
async function childNodes(conversationId, depth, seen) {
  const { items: requests } = await get(`${base(conversationId)}/children?limit=100`);
  const nodes = await Promise.all(requests.map(async (request) => {
    const child = request.child_conversation_id;
    if (request.agent) return remoteNode(request, depth);
    let below = null;
    let title = '';
    if (depth < 4 && !seen.has(child)) {
      seen.add(child);
      const [tree, about] = await Promise.all([
        childNodes(child, depth + 1, seen).catch(() => null),
        get(base(child)).catch(() => null),
      ]);
      below = tree;
      title = about ? about.title : '';
    }
    return h('li', { class: 'child', dataset: { child } },
      requestLine(request, idCopy(child, link(conversationRoute(child), title || short(child))),
        depth),
      below && below.childElementCount ? below : null);
  }));
  return h('ul', { class: 'tree', dataset: { depth: String(depth) } }, nodes);
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
    h('p', { class: 'muted' }, 'Signals carry what happens in the background (a task that '
      + 'ended, a child\'s reply) to this conversation\'s turns.'),
    h('dl', { class: 'stats' },
      h('dt', {}, 'not yet settled'), h('dd', {}, String(stats.backlog)),
      h('dt', {}, 'ready to deliver'), h('dd', {}, String(stats.ready)),
      h('dt', {}, 'being delivered'), h('dd', {}, String(stats.leased)),
      h('dt', {}, 'oldest waiting for'), h('dd', {}, stats.oldest_age_us === null ? '—'
        : duration(stats.oldest_age_us / 1000)),
      h('dt', {}, 'failed for good'), h('dd', {}, String(stats.dead_letters))),
    letters.items.length ? h('h2', {}, 'Dead letters (failed for good)') : null,
    items(letters.items.map((d) => h('div', { class: 'item letter',
      dataset: { delivery: String(d.delivery_id) } },
    h('div', { class: 'line' }, `delivery ${d.delivery_id}`, h('code', {}, d.type)),
    facts(d.attempts === 1 ? '1 attempt' : `${d.attempts} attempts`,
      h('span', { class: 'failure' }, failureWords(d.failure_code) || 'failed')))),
    'No dead letters.'));
}
