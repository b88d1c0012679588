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
