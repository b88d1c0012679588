// The console's shell: sign-in, the navigation, and the views by route (#/, #/c/<id>, #/ops).

import { ApiError, forget, get, remember, session, words } from './api.js';
import { h, replace } from './dom.js';
import { conversationList } from './list.js';
import { conversationView } from './conversation.js';
import { operatorView } from './operator.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
const who = document.getElementById('who');
const notices = document.getElementById('notices');

let current = null; // the view on screen: { stop() }

// A message in plain words at the top of the page; errors stay until dismissed.
export function notify(text, kind) {
  const note = h('div', { class: 'toast ' + (kind || 'info') },
    h('span', {}, text),
    h('button', { type: 'button', class: 'close', 'aria-label': 'dismiss',
      onclick: () => note.remove() }, '×'));
  notices.append(note);
  if (kind !== 'error') setTimeout(() => note.remove(), 4000);
  return note;
}

export function failed(error) {
  if (error instanceof ApiError && error.code === 'unauthorized') {
    signOut('The server no longer accepts this token. Sign in again.');
    return;
  }
  notify(words(error), 'error');
}

function signOut(message) {
  forget();
  replace(notices);
  if (current) current.stop();
  current = null;
  signInForm(message);
}

function signInForm(message) {
  replace(nav);
  replace(who);
  const input = h('input', { type: 'password', name: 'token', id: 'token', autocomplete: 'off',
    placeholder: 'bearer token', required: true, spellcheck: 'false' });
  const said = h('p', { class: 'error', id: 'signin-error' }, message || '');
  const form = h('form', { class: 'signin', id: 'signin' },
    h('h1', {}, 'Sign in'),
    h('p', { class: 'muted' },
      'Paste a principal\'s or an operator\'s token. It is kept for this tab only and sent '
      + 'with each request; closing the tab forgets it.'),
    h('label', { for: 'token' }, 'Token'), input,
    h('button', { type: 'submit' }, 'Sign in'),
    said);
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    remember(token);
    try {
      await start();
    } catch (error) {
      forget();
      said.textContent = error instanceof ApiError && error.code === 'unauthorized'
        ? 'That token is not accepted by this server.' : words(error);
    }
  });
  replace(main, form);
  input.focus();
}

async function start() {
  session.who = await get('/v1/session');
  const me = session.who;
  replace(who,
    h('span', { class: 'me', id: 'me' },
      me.principal ? me.principal : 'operator',
      me.operator && me.principal ? ' (operator)' : ''),
    h('button', { type: 'button', id: 'signout', onclick: () => signOut('Signed out.') },
      'Sign out'));
  replace(nav,
    h('a', { href: '#/', id: 'nav-conversations' }, 'Conversations'),
    me.operator ? h('a', { href: '#/ops', id: 'nav-operator' }, 'Operator') : null);
  route();
}

function route() {
  if (!session.who) return;
  if (current) current.stop();
  replace(notices); // what was said about the last view is not about this one
  const hash = location.hash.replace(/^#/, '') || '/';
  const context = { notify, failed, main };
  for (const a of nav.querySelectorAll('a')) {
    a.classList.toggle('here', a.getAttribute('href') === '#' + (hash.startsWith('/c/')
      ? '/' : hash));
  }
  if (hash.startsWith('/c/')) {
    current = conversationView(decodeURIComponent(hash.slice(3)), context);
  } else if (hash === '/ops' && session.who.operator) {
    current = operatorView(context);
  } else {
    current = conversationList(context);
  }
}

window.addEventListener('hashchange', route);

if (session.token) {
  start().catch((error) => {
    if (error instanceof ApiError && error.code === 'unauthorized') signOut(words(error));
    else signInForm(words(error));
  });
} else {
  signInForm();
}
