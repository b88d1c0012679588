// The questions a conversation's MCP servers ask its people: each pending one as a form built
// from its requested schema (a flat object: string, number, integer, boolean, an enum, an array
// of an enum), answered with Accept, Decline or Cancel; the server checks the answer against
// the schema and its refusal is shown inline, under the form, leaving the question pending.
// The answered ones are listed below with how each ended.

import { get, post, words } from './api.js';
import { badge, button, h, idCopy, json, replace } from './dom.js';

const INPUT_TYPES = { email: 'email', uri: 'url', date: 'date', 'date-time': 'datetime-local' };

function choices(field) {
  if (Array.isArray(field.enum)) return field.enum.map((value) => ({ value, title: value }));
  const options = field.oneOf || field.anyOf;
  if (Array.isArray(options) && options.every((o) => o && 'const' in o)) {
    return options.map((o) => ({ value: o.const, title: o.title || o.const }));
  }
  return null;
}

// One input per property; read() gives its value for the answer (undefined: left empty).
function fieldInput(name, field, required, id) {
  const kind = field.type || 'string';
  const options = choices(field);
  const items = kind === 'array' && field.items ? choices(field.items) : null;
  if (items) {
    const boxes = items.map((option) => h('input', { type: 'checkbox', value: String(option.value),
      name, checked: (field.default || []).includes(option.value) }));
    const el = h('span', { class: 'choices', id },
      items.map((option, n) => h('label', {}, boxes[n], ' ', String(option.title))));
    return { el, read: () => items.filter((o, n) => boxes[n].checked).map((o) => o.value) };
  }
  if (options) {
    const select = h('select', { id, name },
      required ? null : h('option', { value: '' }, '—'),
      options.map((option, n) => h('option', { value: String(n),
        selected: field.default === option.value }, String(option.title))));
    return { el: select, read: () => (select.value === '' ? undefined
      : options[Number(select.value)].value) };
  }
  if (kind === 'boolean') {
    const box = h('input', { type: 'checkbox', id, name, checked: field.default === true });
    return { el: box, read: () => box.checked };
  }
  if (kind === 'integer' || kind === 'number') {
    // No min/max on the input: the server checks the bounds and says what does not fit.
    const input = h('input', { type: 'number', id, name, step: kind === 'integer' ? '1' : 'any',
      value: field.default });
    return { el: input, read: () => (input.value === '' ? undefined : Number(input.value)) };
  }
  const input = h('input', { type: INPUT_TYPES[field.format] || 'text', id, name,
    value: field.default, maxlength: field.maxLength });
  return { el: input, read: () => (input.value === '' && !required ? undefined : input.value) };
}

function bounds(field) {
  const said = [];
  if (field.minimum !== undefined) said.push(`≥ ${field.minimum}`);
  if (field.maximum !== undefined) said.push(`≤ ${field.maximum}`);
  if (field.minLength !== undefined) said.push(`at least ${field.minLength} characters`);
  if (field.maxLength !== undefined) said.push(`at most ${field.maxLength} characters`);
  return said.join(', ');
}

// A pending question as a form; send(body) gives the answer to the server (the default posts
// it to the question's answer route).
export function questionCard(question, path, context, answered, send) {
  const url = `${path}/questions/${encodeURIComponent(question.question_id)}/answer`;
  const give = send || ((body) => post(url, body));
  const schema = question.requested_schema || {};
  const required = new Set(schema.required || []);
  const fields = Object.entries(schema.properties || {}).map(([name, field]) => {
    const id = `q-${question.question_id}-${name}`;
    const input = fieldInput(name, field || {}, required.has(name), id);
    const hint = [field.type || '', bounds(field || {})].filter(Boolean).join(', ');
    return { name, input, row: h('div', { class: 'field', dataset: { field: name } },
      h('label', { for: id }, field.title || name,
        required.has(name) ? h('span', { class: 'required', title: 'required' }, ' *') : null),
      input.el,
      h('span', { class: 'hint' }, hint),
      field.description ? h('div', { class: 'muted' }, field.description) : null) };
  });
  const error = h('div', { class: 'question-error error', role: 'alert' });
  const form = h('form', { class: 'question', novalidate: true,
    dataset: { question: question.question_id } });

  async function answer(action) {
    const body = { action };
    if (action === 'accept') {
      body.content = {};
      for (const { name, input } of fields) {
        const value = input.read();
        if (value !== undefined) body.content[name] = value;
      }
    }
    for (const control of form.querySelectorAll('button')) control.disabled = true;
    try {
      await give(body);
      error.textContent = '';
      context.notify(action === 'accept' ? 'Answered: the server has your answer.'
        : `The question was ${action === 'decline' ? 'declined' : 'cancelled'}.`);
      answered();
    } catch (failure) {
      error.textContent = words(failure);
    } finally {
      for (const control of form.querySelectorAll('button')) control.disabled = false;
    }
  }

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    answer('accept');
  });
  const asker = question.kind === 'sampling' ? ' asks to use the conversation\'s model'
    : ' asks';
  replace(form,
    h('div', { class: 'asker' }, h('strong', {}, question.asker), asker,
      question.run_id ? h('span', { class: 'muted' }, ' (run ', idCopy(question.run_id), ')')
        : null,
      question.task_key ? h('span', { class: 'muted' }, ` (task ${question.task_key})`) : null),
    h('div', { class: 'message' }, question.message),
    fields.length ? h('div', { class: 'fields' }, fields.map((f) => f.row)) : null,
    h('div', { class: 'actions' },
      h('button', { type: 'submit', class: 'accept' }, 'Accept'),
      button('Decline', () => answer('decline'), { class: 'decline' }),
      button('Cancel', () => answer('cancel'), { class: 'cancel' })),
    error);
  return form;
}

// The questions section of a conversation: refresh() reads them again. A form being filled
// stays as it is (only questions that came or went change the page).
export function questionsView(path, context) {
  const pending = h('div', { class: 'pending-questions' });
  const answered = h('details', { class: 'answered-questions', id: 'answered-questions',
    hidden: true });
  const heading = h('h2', { hidden: true }, 'A question for you');
  // Built once: a refresh never takes a form being filled out of the page (nor its focus).
  const el = h('section', { class: 'questions', id: 'questions', dataset: { pending: '0' } },
    heading, pending, answered);
  const cards = new Map();
  let running = null;

  async function read() {
    const { questions } = await get(`${path}/questions`);
    const waiting = questions.filter((q) => q.status === 'pending').reverse();
    const done = questions.filter((q) => q.status !== 'pending');
    const ids = new Set(waiting.map((q) => q.question_id));
    for (const [id, card] of cards) {
      if (!ids.has(id)) {
        card.remove();
        cards.delete(id);
      }
    }
    for (const question of waiting) {
      if (!cards.has(question.question_id)) {
        const card = questionCard(question, path, context, () => refresh());
        cards.set(question.question_id, card);
        pending.append(card);
      }
    }
    replace(answered, done.length ? [h('summary', {}, `Answered questions (${done.length})`),
      h('ul', {}, done.map((q) => h('li', { dataset: { question: q.question_id,
        status: q.status } }, badge(q.status), ' ', h('strong', {}, q.asker), ': ', q.message,
      q.answer ? h('code', { class: 'answer' }, ' ', json(q.answer)) : null,
      q.decided_by ? h('span', { class: 'muted' }, ` · by ${q.decided_by}`) : null)))] : null);
    heading.hidden = !waiting.length;
    heading.textContent = waiting.length > 1 ? `${waiting.length} questions for you`
      : 'A question for you';
    answered.hidden = !done.length;
    el.dataset.pending = String(waiting.length);
    el.classList.toggle('asking', waiting.length > 0);
  }

  function refresh() {
    // One read at a time; a refresh asked for meanwhile reads once more after it.
    if (running) {
      running.again = true;
      return running.done;
    }
    running = { again: false };
    running.done = (async () => {
      try {
        do {
          running.again = false;
          await read();
        } while (running.again);
      } catch (error) {
        context.failed(error);
      } finally {
        running = null;
      }
    })();
    return running.done;
  }

  return { el, refresh };
}
