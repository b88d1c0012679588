// Building the page: every piece of data enters the DOM as text (a text node or textContent),
// never as markup. Attributes are set only from the console's own values.

export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'text') el.textContent = String(value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key.startsWith('on') && typeof value === 'function') {
      el.addEventListener(key.slice(2), value);
    } else el.setAttribute(key, value === true ? '' : String(value));
  }
  put(el, children);
  return el;
}

export function put(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function replace(el, ...children) {
  return put(clear(el), children);
}

// A link inside the console: only ever a hash route the console built itself.
export function link(route, ...children) {
  return h('a', { href: '#' + route }, ...children);
}

export function conversationRoute(id) {
  return '/c/' + encodeURIComponent(id);
}

export function badge(status) {
  const word = String(status || 'none');
  return h('span', { class: 'badge s-' + word.replace(/[^a-z_]/g, '') }, word.replace(/_/g, ' '));
}

// Why a run ended, in words (the code itself stays in the element's tooltip). Nothing when
// the code only repeats the status ("stopped").
const FAILURES = {
  stopped: 'stopped by a person',
  shutdown: 'the server shut down during the turn',
  interrupted: 'the server stopped during the turn',
  cancelled: 'cancelled',
  model_permanent: 'the model refused the request',
  model_retryable: 'the model failed',
  model_unavailable: 'no model could answer',
  model_retries_exhausted: 'the model kept failing: its retries are spent',
  max_steps_exceeded: 'too many steps in one turn',
  history_exceeds_fit: 'the history no longer fits the model\'s window',
  turn_failed: 'the turn failed',
};

export function failureWords(code, status) {
  if (!code || code === status) return '';
  return FAILURES[code] || String(code).replace(/_/g, ' ');
}

// What started a run, in words.
const TRIGGERS = {
  person: 'for a person',
  agent: 'for another agent',
  mail: 'for a notice or a reply',
  wake: 'woken by the runtime',
  goal: 'for its goal',
};

export function triggerWords(trigger) {
  return TRIGGERS[trigger] || String(trigger || '').replace(/_/g, ' ');
}

export function ago(us) {
  if (us === null || us === undefined) return '—';
  const seconds = Math.max(0, (Date.now() * 1000 - us) / 1e6);
  if (seconds < 5) return 'just now';
  if (seconds < 60) return `${Math.floor(seconds)} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

export function when(us) {
  if (us === null || us === undefined) return '—';
  return new Date(us / 1000).toLocaleString();
}

export function duration(ms) {
  if (ms === null || ms === undefined) return '—';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

export function short(id) {
  const text = String(id || '');
  return text.length > 18 ? text.slice(0, 9) + '…' + text.slice(-6) : text;
}

// Puts text in the clipboard: the Clipboard API where the page may use it, else the older
// copy command over a hidden text box (a page served over plain http to another host).
export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // refused (no permission, the page not focused): try the older way
    }
  }
  const box = h('textarea', { class: 'copy-source', readonly: true, 'aria-hidden': 'true' });
  box.value = text;
  document.body.append(box);
  box.select();
  let done = false;
  try {
    done = document.execCommand('copy');
  } catch {
    done = false;
  }
  box.remove();
  return done;
}

// An id as the page shows it (in short, or as `shown`), with a button that copies it whole.
// The whole id is also the element's tooltip.
export function idCopy(id, shown) {
  const full = String(id || '');
  const copy = h('button', { type: 'button', class: 'copy', title: 'Copy ' + full,
    'aria-label': 'copy ' + full, dataset: { copy: full } }, 'copy');
  copy.addEventListener('click', async (event) => {
    event.preventDefault();
    event.stopPropagation();
    const done = await copyText(full);
    copy.textContent = done ? 'copied' : 'select it';
    copy.classList.toggle('copied', done);
    setTimeout(() => {
      copy.textContent = 'copy';
      copy.classList.remove('copied');
    }, 1500);
  });
  return h('span', { class: 'id-copy', dataset: { id: full } },
    shown === undefined ? h('code', { class: 'short-id', title: full }, short(full)) : shown,
    copy);
}

export function json(value) {
  return JSON.stringify(value, null, 2);
}

export function table(headings, rows, empty) {
  if (!rows.length) return h('p', { class: 'muted empty' }, empty || 'Nothing yet.');
  return h('table', {},
    h('thead', {}, h('tr', {}, headings.map((name) => h('th', {}, name)))),
    h('tbody', {}, rows));
}

export function button(label, onclick, props) {
  return h('button', { type: 'button', ...(props || {}), onclick }, label);
}

// A button that asks once more before it acts (no blocking dialogs).
export function confirmButton(label, confirmLabel, action, props) {
  const el = button(label, async () => {
    if (el.dataset.armed !== '1') {
      el.dataset.armed = '1';
      el.textContent = confirmLabel;
      el.classList.add('armed');
      return;
    }
    el.disabled = true;
    try {
      await action();
    } finally {
      el.disabled = false;
      el.dataset.armed = '';
      el.textContent = label;
      el.classList.remove('armed');
    }
  }, props);
  return el;
}

// Runs fn at most once per `ms`, trailing: a burst of events makes one refresh.
export function debounce(fn, ms) {
  let timer = null;
  return () => {
    if (timer !== null) return;
    timer = setTimeout(() => { timer = null; fn(); }, ms);
  };
}
