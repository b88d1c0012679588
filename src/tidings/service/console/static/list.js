// The conversations: a principal's own, or an operator's view of every one, newest first,
// with status, last activity and the newest run; a form to open one.

import { get, post, session } from './api.js';
import {
  ago, badge, conversationRoute, h, idCopy, link, replace, short, table,
} from './dom.js';
import { Family } from './family.js';

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

// What the list calls a conversation's status: archived (or deleted), else what its newest run
// is doing, else idle.
function statusOf(item) {
  const run = item.run;
  return item.status !== 'active' ? item.status
    : run && ['queued', 'running', 'awaiting_approval'].includes(run.status) ? run.status
      : 'idle';
}

// A conversation's row; a child's is drawn under its parent's, set in by its depth. A child
// whose parent is not shown says whose child it is.
function row({ item, depth, parent }, operator) {
  const run = item.run;
  const dataset = { conversation: item.conversation_id, status: statusOf(item),
    depth: String(depth) };
  if (parent) dataset.parent = parent;
  return h('tr', { class: depth ? 'child-row' : '', dataset },
    h('td', { class: `name depth-${Math.min(depth, 4)}` },
      depth ? h('span', { class: 'branch', 'aria-hidden': 'true' }, '↳ ') : null,
      link(conversationRoute(item.conversation_id), item.title || '(untitled)'),
      h('div', { class: 'id' }, idCopy(item.conversation_id)),
      parent && !depth ? h('div', { class: 'id' }, 'opened by ',
        idCopy(parent, link(conversationRoute(parent), short(parent)))) : null),
    operator ? h('td', {}, item.owner) : null,
    h('td', {}, badge(statusOf(item))),
    h('td', {}, run ? badge(run.status) : h('span', { class: 'muted' }, 'no run yet'),
      run ? h('div', { class: 'id' }, idCopy(run.run_id), run.model ? ' · ' + run.model : '')
        : null),
    h('td', { title: new Date(item.last_activity_us / 1000).toLocaleString() },
      ago(item.last_activity_us)),
    h('td', {}, item.profile.model));
}

// The words a search finds a conversation by: its title, id, owner, model and newest run.
function searchable(item) {
  return [item.title, item.conversation_id, item.owner, item.profile.model,
    item.run ? item.run.run_id : '', item.run ? item.run.model : '']
    .join('\n').toLowerCase();
}

const STATUS_ORDER = ['running', 'queued', 'awaiting_approval', 'idle', 'archived',
  'tombstoned'];

// The search box and the status filter: they narrow what is loaded (Show older loads more).
function filters(onChange) {
  const search = h('input', { type: 'search', id: 'search', name: 'search',
    placeholder: 'search by title, id, owner or model', 'aria-label': 'search conversations',
    spellcheck: 'false', autocomplete: 'off' });
  const status = h('select', { id: 'status-filter', 'aria-label': 'show conversations that are' },
    h('option', { value: '' }, 'every status'));
  const count = h('span', { class: 'count', id: 'shown-count' });
  search.addEventListener('input', onChange);
  status.addEventListener('change', onChange);
  let offered = '';
  return {
    el: h('div', { class: 'filters', id: 'filters' }, search, status, count),
    // The statuses the loaded conversations have, each with how many: the choices.
    offer(items) {
      const counts = new Map();
      for (const item of items) counts.set(statusOf(item), (counts.get(statusOf(item)) || 0) + 1);
      const kinds = [...counts.keys()].sort((a, b) => {
        const [x, y] = [STATUS_ORDER.indexOf(a), STATUS_ORDER.indexOf(b)];
        return (x < 0 ? 99 : x) - (y < 0 ? 99 : y) || a.localeCompare(b);
      });
      if (status.value && !counts.has(status.value)) kinds.push(status.value);
      const now = JSON.stringify(kinds.map((k) => [k, counts.get(k) || 0]));
      if (now === offered) return; // an open choice is not redrawn under the pointer
      offered = now;
      const chosen = status.value;
      replace(status, h('option', { value: '' }, 'every status'),
        kinds.map((k) => h('option', { value: k }, `${k.replace(/_/g, ' ')} (${
          counts.get(k) || 0})`)));
      status.value = chosen;
    },
    keep(item) {
      const words = search.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
      const text = searchable(item);
      return (!status.value || statusOf(item) === status.value)
        && words.every((word) => text.includes(word));
    },
    get key() { return [search.value, status.value]; },
    said(shown, loaded) {
      count.textContent = shown === loaded ? `${loaded} shown`
        : `${shown} of the ${loaded} loaded`;
    },
  };
}

export function conversationList(context) {
  const operator = session.who.operator;
  const me = session.who;
  const body = h('div', { class: 'list-body' });
  const more = h('div', { class: 'more' });
  const narrow = filters(() => render());
  const family = new Family();
  const view = h('section', { class: 'conversations', id: 'conversations' },
    h('div', { class: 'heading' },
      h('h1', {}, operator ? 'Every conversation' : 'Your conversations'),
      openById()),
    me.principal ? createForm(context) : null,
    narrow.el, body, more);
  replace(context.main, view);
  let items = [];
  let next = null;
  let stopped = false;
  let marked = false;
  let drawn = '';

  function render() {
    const now = JSON.stringify([items, next, narrow.key, family.version]);
    if (now === drawn) return; // unchanged: nothing is redrawn under the reader's pointer
    drawn = now;
    narrow.offer(items);
    const shown = items.filter((item) => narrow.keep(item));
    narrow.said(shown.length, items.length);
    const headings = ['Conversation', operator ? 'Owner' : null, 'Status', 'Newest run',
      'Last activity', 'Model'].filter(Boolean);
    replace(body, table(headings, family.arrange(shown).map((placed) => row(placed, operator)),
      items.length ? 'No conversation loaded matches; Show older looks further back.'
        : 'No conversations yet.'));
    replace(more, next ? h('button', { type: 'button', id: 'more', onclick: loadMore },
      'Show older') : null);
    if (!marked) {
      marked = true;
      performance.mark('tidings-list-ready'); // the list is on screen
    }
  }

  async function load() {
    // The newest first page is refreshed; pages the person asked for stay as they were.
    const page = await get(`/v1/conversations?order=newest&limit=${PAGE}`);
    const older = items.slice(PAGE);
    items = [...page.items, ...older];
    if (!older.length) next = page.next_after;
    render();
    await family.learn(items);
    render();
    if (!stopped) context.main.dataset.ready = 'list'; // drawn as a tree too
  }

  async function loadMore() {
    if (!next) return;
    try {
      const page = await get(`/v1/conversations?order=newest&limit=${PAGE}&after=${
        encodeURIComponent(next)}`);
      items = [...items, ...page.items];
      next = page.next_after;
      render();
      await family.learn(items);
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
