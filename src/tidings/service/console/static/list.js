// The conversations: a principal's own, or an operator's view of every one, newest first,
// with status, last activity and the newest run; a form to open one.

import { get, post, session } from './api.js';
import { ago, badge, conversationRoute, h, link, replace, short, table } from './dom.js';

const PAGE = 100;
const REFRESH_MS = 3000;

function createForm(context) {
  const me = session.who;
  const title = h('input', { name: 'title', id: 'new-title', placeholder: 'title (optional)' });
  const profile = h('select', { name: 'profile', id: 'new-profile' },
    h('option', { value: '' }, 'a profile of my own:'),
    me.profiles.map((name) => h('option', { value: name }, name)));
  const model = h('select', { name: 'model', id: 'new-model' },
    me.models.map((name) => h('option', { value: name }, name)));
  const tools = h('input', { name: 'tools', id: 'new-tools',
    placeholder: 'tools, e.g. shell, spawn' });
  const approval = h('select', { name: 'approval', id: 'new-approval' },
    ['never', 'writes', 'always'].map((mode) => h('option', { value: mode },
      'approval: ' + mode)));
  const form = h('form', { class: 'create', id: 'create' },
    h('h2', {}, 'New conversation'),
    h('div', { class: 'row' }, title, profile, model, tools, approval,
      h('button', { type: 'submit', id: 'create-submit' }, 'Open')),
    h('p', { class: 'muted' }, 'Tools this server has: ', me.tools.join(', ') || 'none'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const chosen = tools.value.split(/[\s,]+/).filter(Boolean);
    const body = profile.value
      ? { profile: profile.value, title: title.value }
      : { profile: { model: model.value, tools: chosen, approval_mode: approval.value },
        title: title.value };
    try {
      const created = await post('/v1/conversations', body);
      location.hash = '#' + conversationRoute(created.conversation_id);
    } catch (error) {
      context.failed(error);
    }
  });
  return form;
}

function openById() {
  const input = h('input', { name: 'open', id: 'open-id', placeholder: 'conv_…',
    spellcheck: 'false' });
  const form = h('form', { class: 'open', id: 'open' },
    h('label', { for: 'open-id' }, 'Open a conversation by id '), input,
    h('button', { type: 'submit' }, 'Open'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (input.value.trim()) location.hash = '#' + conversationRoute(input.value.trim());
  });
  return form;
}

function row(item, operator) {
  const run = item.run;
  const status = item.status !== 'active' ? item.status
    : run && ['queued', 'running', 'awaiting_approval'].includes(run.status) ? run.status
      : 'idle';
  return h('tr', { dataset: { conversation: item.conversation_id } },
    h('td', {}, link(conversationRoute(item.conversation_id),
      item.title || '(untitled)'), h('div', { class: 'id' }, item.conversation_id)),
    operator ? h('td', {}, item.owner) : null,
    h('td', {}, badge(status)),
    h('td', {}, run ? badge(run.status) : h('span', { class: 'muted' }, 'no run yet'),
      run ? h('div', { class: 'id' }, short(run.run_id), run.model ? ' · ' + run.model : '')
        : null),
    h('td', { title: new Date(item.last_activity_us / 1000).toLocaleString() },
      ago(item.last_activity_us)),
    h('td', {}, item.profile.model));
}

export function conversationList(context) {
  const operator = session.who.operator;
  const me = session.who;
  const body = h('div', { class: 'list-body' });
  const more = h('div', { class: 'more' });
  const view = h('section', { class: 'conversations', id: 'conversations' },
    h('div', { class: 'heading' },
      h('h1', {}, operator ? 'Every conversation' : 'Your conversations'),
      openById()),
    me.principal ? createForm(context) : null,
    body, more);
  replace(context.main, view);
  let items = [];
  let next = null;
  let stopped = false;
  let first = true;
  let drawn = '';

  function render() {
    const now = JSON.stringify([items, next]);
    if (now === drawn) return; // unchanged: nothing is redrawn under the reader's pointer
    drawn = now;
    const headings = ['Conversation', operator ? 'Owner' : null, 'Status', 'Newest run',
      'Last activity', 'Model'].filter(Boolean);
    replace(body, table(headings, items.map((item) => row(item, operator)),
      'No conversations yet.'));
    replace(more, next ? h('button', { type: 'button', id: 'more', onclick: loadMore },
      'Show older') : null);
    if (first) {
      first = false;
      performance.mark('tidings-list-ready');
      context.main.dataset.ready = 'list';
    }
  }

  async function load() {
    // The newest first page is refreshed; pages the person asked for stay as they were.
    const page = await get(`/v1/conversations?order=newest&limit=${PAGE}`);
    const older = items.slice(PAGE);
    items = [...page.items, ...older];
    if (!older.length) next = page.next_after;
    render();
  }

  async function loadMore() {
    if (!next) return;
    try {
      const page = await get(`/v1/conversations?order=newest&limit=${PAGE}&after=${
        encodeURIComponent(next)}`);
      items = [...items, ...page.items];
      next = page.next_after;
      render();
    } catch (error) {
      context.failed(error);
    }
  }

  let timer = null;
  async function tick() {
    try {
      await load();
    } catch (error) {
      context.failed(error);
    }
    if (!stopped) timer = setTimeout(tick, REFRESH_MS);
  }
  tick();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
