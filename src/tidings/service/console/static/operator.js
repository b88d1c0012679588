// The operator's view across every conversation: the signal backlog and its oldest age, the
// instances over this database, the dead letters (inspect, retry, discard), the A2A push
// notifications that failed for good (webhook dead letters), and unlocking a runtime that
// booted locked.

import { get, post, session } from './api.js';
import {
  ago, badge, button, confirmButton, conversationRoute, duration, h, idCopy, json, link, replace,
  short, table,
} from './dom.js';

const REFRESH_MS = 3000;
const INSTANCES = 200; // the instances read; more gone ones are counted as "or more"

function instanceRow(i) {
  return h('tr', { dataset: { instance: i.instance_id, state: i.state } },
    h('td', {}, idCopy(i.instance_id),
      i.serving ? h('span', { class: 'serving' }, ' this one') : null),
    h('td', {}, `${i.hostname} · pid ${i.pid}`),
    h('td', { class: 'instance-state' }, badge(i.state)),
    h('td', {}, ago(i.started_at_us)),
    h('td', {}, i.stopped_at_us ? 'stopped ' + ago(i.stopped_at_us)
      : 'last heard ' + ago(i.heartbeat_at_us)));
}

function stat(label, value, id) {
  return h('div', { class: 'stat', id }, h('div', { class: 'value' }, String(value)),
    h('div', { class: 'label' }, label));
}

export function operatorView(context) {
  const backlog = h('section', { class: 'card', id: 'backlog' });
  const instances = h('section', { class: 'card', id: 'instances' });
  const letters = h('section', { class: 'card', id: 'dead-letters' });
  const webhooks = h('section', { class: 'card', id: 'webhook-dead-letters' });
  const unlock = h('section', { class: 'card', id: 'unlock' });
  replace(context.main, h('section', { class: 'operator', id: 'operator' },
    h('h1', {}, 'Operator'), unlock, backlog, letters, webhooks, instances));
  const inspected = new Map(); // delivery id -> the open detail row's content
  let goneOpen = false; // the gone instances unfolded: a redraw keeps them so
  const drawn = new Map(); // card -> what it shows: a card is redrawn only when that changes
  const changed = (card, value) => {
    const text = JSON.stringify(value);
    if (drawn.get(card) === text) return false;
    drawn.set(card, text);
    return true;
  };
  let stopped = false;
  let timer = null;

  async function unlockCard() {
    const health = await get('/health').catch(() => null);
    const locked = (health && health.status === 'locked') || session.who.locked;
    if (!locked) {
      replace(unlock);
      unlock.hidden = true;
      return;
    }
    unlock.hidden = false;
    const key = h('input', { type: 'password', id: 'master-key', autocomplete: 'off',
      placeholder: '64 hex digits', spellcheck: 'false' });
    const form = h('form', { id: 'unlock-form' },
      h('h2', {}, 'This runtime is locked'),
      h('p', {}, 'It serves, but runs and delivers nothing until it is given its master key.'),
      key, h('button', { type: 'submit' }, 'Unlock'));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      try {
        const answer = await post('/v1/unlock', { master_key: key.value.trim() });
        key.value = '';
        session.who.locked = answer.status === 'locked';
        context.notify(answer.status === 'ok' ? 'Unlocked: the runtime is running.'
          : 'Still locked.');
        unlockCard();
      } catch (error) {
        context.failed(error);
      }
    });
    replace(unlock, form);
  }

  async function refresh() {
    const [stats, found, dead, pushed] = await Promise.all([
      get('/v1/signals/stats'), get(`/v1/instances?limit=${INSTANCES}`), get('/v1/dead-letters?limit=200'),
      get('/v1/push-dead-letters?limit=200'),
    ]);
    if (changed(webhooks, pushed)) replace(webhooks, h('h2', {}, 'Webhook dead letters'),
      h('p', { class: 'muted' }, 'A2A push notifications that failed for good (their attempts '
        + 'spent, or a target refused). Nothing sends them again.'),
      table(['Delivery', 'Notification', 'Context', 'Config', 'Attempts', 'Failure',
        'Dead since'],
      pushed.items.map((d) => h('tr', { dataset: { delivery: String(d.delivery_id) },
        class: 'webhook-letter' },
        h('td', {}, String(d.delivery_id)),
        h('td', {}, h('code', {}, d.notification_id), ` ${d.event_type}`),
        h('td', {}, idCopy(d.context_id, link(conversationRoute(d.context_id),
          short(d.context_id)))),
        h('td', {}, d.config_id),
        h('td', {}, String(d.attempts)),
        h('td', {}, h('code', {}, d.failure_code)),
        h('td', {}, ago(d.settled_at_us)))),
      'No webhook dead letters.'));
    context.main.dataset.ready = 'operator';
    if (changed(backlog, stats)) {
      replace(backlog, h('h2', {}, 'Signals'), h('div', { class: 'stats-row' },
        stat('not yet settled', stats.backlog, 'stat-backlog'),
        stat('ready to deliver', stats.ready), stat('being delivered', stats.leased),
        stat('oldest waiting for', stats.oldest_age_us === null ? '—'
          : duration(stats.oldest_age_us / 1000), 'stat-oldest'),
        stat('delivered again after a failure', stats.retried),
        stat('dead letters', stats.dead_letters, 'stat-dead')),
      h('p', { class: 'muted' }, 'Signals carry what happens in the background (a task that '
        + 'ended, a child\'s reply, a wake-up) to the conversations\' turns.'));
    }
    if (changed(instances, found)) {
      // The instances still running (or silent: not heard from lately) are listed; the gone
      // ones -- one for every restart -- are folded below, counted.
      const here = found.items.filter((i) => i.state !== 'stopped');
      const gone = found.items.filter((i) => i.state === 'stopped');
      const counted = found.items.length >= INSTANCES ? `${gone.length} or more` : gone.length;
      const fold = gone.length ? h('details', { class: 'gone-instances', id: 'gone-instances',
        open: goneOpen },
      h('summary', {}, `${counted} gone (stopped)`),
      table(['Instance', 'Host', 'State', 'Started', 'Last heard'], gone.map(instanceRow)))
        : null;
      if (fold) fold.addEventListener('toggle', () => { goneOpen = fold.open; });
      replace(instances, h('h2', {}, 'Instances'),
        h('p', { class: 'muted' }, 'The servers that run over this database.'),
        table(['Instance', 'Host', 'State', 'Started', 'Last heard'], here.map(instanceRow),
          'None running.'),
        fold);
    }
    if (!changed(letters, [dead, [...inspected.keys()]])) return;
    const rows = [];
    for (const d of dead.items) {
      rows.push(h('tr', { dataset: { delivery: String(d.delivery_id) }, class: 'letter' },
        h('td', {}, String(d.delivery_id)),
        h('td', {}, idCopy(d.conversation_id, link(conversationRoute(d.conversation_id),
          short(d.conversation_id)))),
        h('td', {}, d.type),
        h('td', {}, String(d.attempts)),
        h('td', {}, h('code', {}, d.failure_code)),
        h('td', {}, ago(d.published_at_us)),
        h('td', {}, ago(d.settled_at_us)),
        h('td', { class: 'actions' },
          button(inspected.has(d.delivery_id) ? 'Hide' : 'Inspect', () => inspect(d),
            { class: 'inspect' }),
          button('Retry', () => act(d, 'retry'), { class: 'retry' }),
          confirmButton('Discard', 'Discard: sure?', () => act(d, 'discard'),
            { class: 'discard' }))));
      if (inspected.has(d.delivery_id)) {
        rows.push(h('tr', { class: 'detail' }, h('td', { colspan: 8 },
          inspected.get(d.delivery_id))));
      }
    }
    replace(letters, h('h2', {}, 'Dead letters'),
      h('p', { class: 'muted' }, 'Deliveries that failed for good. Nothing replays them: '
        + 'retry one to deliver it again with a fresh budget, or discard it.'),
      table(['Delivery', 'Conversation', 'Type', 'Attempts', 'Failure', 'Published',
        'Dead since', ''], rows, 'No dead letters.'));
  }

  async function inspect(letter) {
    if (inspected.has(letter.delivery_id)) {
      inspected.delete(letter.delivery_id);
    } else {
      try {
        const d = await get(`/v1/dead-letters/${letter.delivery_id}`);
        inspected.set(letter.delivery_id, h('div', { class: 'letter-detail' },
          h('div', { class: 'id' }, `event ${d.event_id} · schema ${d.schema_version}`,
            d.operation_id ? ` · operation ${d.operation_id}` : '',
            d.last_lease_owner ? ` · last held by ${d.last_lease_owner}` : '',
            ` · ${d.payload_bytes} bytes`),
          h('pre', { class: 'payload' }, json(d.payload))));
      } catch (error) {
        context.failed(error);
      }
    }
    await refresh().catch(context.failed);
  }

  async function act(letter, action) {
    try {
      const done = await post(`/v1/dead-letters/${letter.delivery_id}/${action}`);
      inspected.delete(letter.delivery_id);
      context.notify(action === 'retry'
        ? `Delivery ${done.delivery_id} is ready again.`
        : `Delivery ${done.delivery_id} was discarded.`);
    } catch (error) {
      context.failed(error);
    }
    await refresh().catch(context.failed);
  }

  async function tick() {
    try {
      await Promise.all([refresh(), unlockCard()]);
    } catch (error) {
      if (!stopped) context.failed(error);
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
