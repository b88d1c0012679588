// One conversation: its run at a glance, the questions its MCP servers ask and the held calls
// waiting for a decision, the live transcript, a composer (queue or steer), and what it does
// in the background.

import { ApiError, get, post, session } from './api.js';
import {
  badge, button, confirmButton, debounce, failureWords, h, idCopy, json, replace,
} from './dom.js';
import { follow } from './feed.js';
import { TranscriptView } from './transcript.js';
import { questionsView } from './questions.js';
import { childrenPanel, runsPanel, signalsPanel, tasksPanel } from './background.js';

const FINAL = new Set(['completed', 'failed', 'needs_attention', 'stopped']);

function notFound(context, id) {
  replace(context.main, h('section', { class: 'not-found', id: 'not-found' },
    h('h1', {}, 'Not found'),
    h('p', {}, 'There is no conversation with the id ', h('code', {}, id), '.'),
    h('p', {}, h('a', { href: '#/' }, 'Back to the conversations'))));
  context.main.dataset.ready = 'not-found';
}

export function conversationView(conversationId, context) {
  const path = `/v1/conversations/${encodeURIComponent(conversationId)}`;
  let feed = null;
  let stopped = false;
  context.main.dataset.ready = '';
  replace(context.main, h('p', { class: 'muted' }, 'Loading…'));

  const runStatus = h('span', { id: 'run-status' }, h('span', { class: 'muted' }, 'none yet'));
  const runNote = h('span', { class: 'failure', id: 'run-note' });
  const feedState = h('span', { class: 'feed-state', id: 'feed-state' }, 'connecting');
  const conversationStatus = h('span', { id: 'conversation-status' });
  const approvals = h('section', { class: 'approvals', id: 'approvals' });
  const transcript = new TranscriptView();
  const questions = questionsView(path, context);
  const panels = {
    runs: { label: 'Runs', render: () => runsPanel(conversationId, context, session.who.models) },
    tasks: { label: 'Tasks',
      render: () => tasksPanel(conversationId, context, transcript.progress) },
    children: { label: 'Children', render: () => childrenPanel(conversationId) },
    signals: { label: 'Signals', render: () => signalsPanel(conversationId) },
  };
  let shown = 'runs';
  const panelBody = h('div', { class: 'panel-body', id: 'panel-body' });
  const tabs = h('div', { class: 'tabs', role: 'tablist' });
  let newestRun = null;
  let drawnPanel = ''; // what the panel shows, serialised to compare a refresh with

  async function refreshPanel() {
    if (stopped) return;
    const which = shown;
    try {
      const content = await panels[which].render();
      // Another tab was chosen meanwhile: this one's answer is not drawn over it.
      if (stopped || which !== shown) return;
      const open = [...panelBody.querySelectorAll('details[open], .output pre')].length;
      // An output page someone is reading is not swept away by a refresh, and a panel that
      // reads as it did is left as it is (a button just pressed keeps its word).
      const now = new XMLSerializer().serializeToString(content); // read, never written back
      const same = panelBody.dataset.panel === which && now === drawnPanel;
      if (!(shown === 'tasks' && open) && !same) {
        replace(panelBody, content);
        drawnPanel = now;
      }
      panelBody.dataset.panel = shown;
    } catch (error) {
      if (!stopped) context.failed(error);
    }
  }

  function showTabs() {
    replace(tabs, Object.entries(panels).map(([key, panel]) => button(panel.label, () => {
      shown = key;
      showTabs();
      replace(panelBody, h('p', { class: 'muted' }, 'Loading…'));
      drawnPanel = '';
      refreshPanel();
    }, { role: 'tab', id: `tab-${key}`, class: key === shown ? 'here' : '',
      'aria-selected': key === shown ? 'true' : 'false' })));
  }

  async function refreshApprovals() {
    if (stopped) return;
    try {
      const { approvals: items } = await get(`${path}/approvals?status=pending`);
      replace(approvals, items.length ? h('h2', {}, 'Waiting for your decision') : null,
        items.map((a) => h('div', { class: 'approval', dataset: { approval: a.approval_id } },
          h('div', {}, 'The model wants to call ', h('strong', {}, a.tool_name), ' (run ',
            idCopy(a.run_id), ')'),
          h('pre', { class: 'arguments' }, json(a.arguments)),
          h('div', { class: 'actions' },
            button('Approve', () => decide(a, true), { class: 'approve' }),
            button('Deny', () => decide(a, false), { class: 'deny' })))));
    } catch (error) {
      if (!stopped) context.failed(error);
    }
  }

  async function decide(approval, approve) {
    try {
      await post(`${path}/approvals/${encodeURIComponent(approval.approval_id)}/decision`,
        { approve });
      context.notify(approve ? 'Approved: the call runs.' : 'Denied: the call will not run.');
    } catch (error) {
      context.failed(error);
    }
    refreshApprovals();
  }

  const later = {
    panel: debounce(refreshPanel, 250),
    approvals: debounce(refreshApprovals, 100),
    questions: debounce(() => { if (!stopped) questions.refresh(); }, 100),
  };

  function glance(runId, status, data) {
    newestRun = { runId, status };
    replace(runStatus, badge(status));
    runStatus.dataset.status = status;
    // The reason in words, and only when it says more than the status ("stopped" once).
    runNote.textContent = failureWords(data.failure_code, status);
    runNote.title = data.failure_code || '';
    retry.hidden = !(status === 'failed' || status === 'needs_attention');
    stopTurn.hidden = FINAL.has(status);
  }

  function onEvent(event) {
    transcript.handle(event);
    const data = event.data || {};
    switch (event.type) {
      case 'turn_status':
        glance(event.run_id || data.run_public_id, data.status, data);
        later.panel();
        later.approvals();
        if (FINAL.has(data.status)) later.questions(); // its calls' questions expired
        break;
      case 'question_asked': case 'question_answered':
        later.questions();
        break;
      case 'mcp_progress':
        if (shown === 'tasks') later.panel();
        break;
      case 'approval_requested': case 'approval_decided': case 'approval_applied':
        later.approvals();
        break;
      case 'task_status': case 'tool_calls': case 'run_stopped': case 'stop_requested':
      case 'input_materialized':
        later.panel();
        break;
      case 'conversation_status':
        replace(conversationStatus, badge(data.status));
        break;
      default: break;
    }
  }

  // -- actions -------------------------------------------------------------------------------

  const retry = button('Retry the run', async () => {
    if (!newestRun) return;
    try {
      await post(`${path}/runs/${encodeURIComponent(newestRun.runId)}/retry`, {});
      context.notify('Retry accepted.');
    } catch (error) {
      context.failed(error);
    }
  }, { id: 'retry-run', hidden: true });
  const stopTurn = button('Stop', async () => {
    try {
      const { run_ids: runs } = await post(`${path}/stop`);
      context.notify(runs.length ? 'Stopping the turn.' : 'Nothing was running.');
    } catch (error) {
      context.failed(error);
    }
  }, { id: 'stop-turn', hidden: true });

  function composer(conversation) {
    const text = h('textarea', { id: 'composer-text', rows: 3, placeholder: 'Write to the agent…',
      'aria-label': 'message' });
    const mode = h('select', { id: 'composer-mode', 'aria-label': 'how to deliver it' },
      h('option', { value: 'queue' }, 'queue: after the running turn'),
      h('option', { value: 'steer' }, 'steer: into the running turn'));
    const form = h('form', { class: 'composer', id: 'composer' }, text,
      h('div', { class: 'row' }, mode, h('button', { type: 'submit', id: 'composer-send' },
        'Send')));
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const content = text.value;
      if (!content.trim()) return;
      try {
        await post(`${path}/inputs`, { content, delivery_mode: mode.value });
        text.value = '';
      } catch (error) {
        context.failed(error);
      }
    });
    text.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) form.requestSubmit();
    });
    if (conversation.status !== 'active') {
      text.disabled = true;
      text.placeholder = 'This conversation is archived: it takes no more input.';
    }
    return form;
  }

  function archive() {
    return confirmButton('Archive', 'Archive: sure?', async () => {
      try {
        const changed = await post(`${path}/archive`);
        replace(conversationStatus, badge(changed.status));
      } catch (error) {
        context.failed(error);
      }
    }, { id: 'archive' });
  }

  // -- the page ------------------------------------------------------------------------------

  (async () => {
    let conversation;
    try {
      conversation = await get(path);
    } catch (error) {
      if (stopped) return;
      if (error instanceof ApiError && error.status === 404) notFound(context, conversationId);
      else context.failed(error);
      return;
    }
    if (stopped) return;
    replace(conversationStatus, badge(conversation.status));
    transcript.owner = conversation.owner; // whose words are the person's
    const usage = conversation.usage;
    showTabs();
    replace(context.main, h('section', { class: 'conversation', id: 'conversation',
      dataset: { conversation: conversationId } },
    h('div', { class: 'heading' },
      h('div', {},
        h('h1', {}, conversation.title || '(untitled)'),
        h('div', { class: 'id' }, idCopy(conversationId, h('span', { class: 'full-id' },
          conversationId)), ' · owner ', conversation.owner, ' · model ',
          conversation.profile.model,
          conversation.profile.tools.length ? ' · tools ' + conversation.profile.tools.join(', ')
            : '',
          usage && usage.model_calls ? ` · ${usage.input_tokens} tokens in, ${
            usage.output_tokens} out` : '')),
      h('div', { class: 'glance' }, conversationStatus, h('span', { class: 'muted' },
        'newest run'), runStatus, runNote, ' ',
        feedState, ' ', retry, stopTurn, archive())),
    h('div', { class: 'columns' },
      h('div', { class: 'left' }, questions.el, approvals, transcript.el,
        session.who.principal || session.who.operator ? composer(conversation) : null),
      h('aside', { class: 'right' }, tabs, panelBody))));
    context.main.dataset.ready = 'conversation';
    questions.refresh();
    refreshApprovals();
    refreshPanel();
    feed = follow(conversationId, {
      after: 0,
      onEvent,
      onState: (state) => {
        feedState.textContent = state === 'live' ? 'live' : state + '…';
        feedState.dataset.state = state;
      },
      onGone: (error) => {
        feedState.textContent = 'ended';
        if (error.status === 404) notFound(context, conversationId);
        else context.failed(error);
      },
    });
  })();

  return {
    stop() {
      stopped = true;
      if (feed) feed.stop();
    },
  };
}
