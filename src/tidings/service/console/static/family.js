// Which conversation opened which, so that the list draws each child under its parent. The
// list the API answers does not say; each listed conversation's children are read once, and
// again only when it has done something since (opening a child is something it does).

import { get } from './api.js';

const AT_ONCE = 6; // children lists read side by side

export class Family {
  constructor() {
    this.known = new Map(); // conversation id -> { at: its last activity, children: [ids] }
    this.version = 0; // grows when what is known changes: the list is drawn again
  }

  async learn(items) {
    const stale = items.filter((item) => {
      const known = this.known.get(item.conversation_id);
      return !known || known.at !== item.last_activity_us;
    });
    for (let n = 0; n < stale.length; n += AT_ONCE) {
      await Promise.all(stale.slice(n, n + AT_ONCE).map(async (item) => {
        let requests;
        try {
          ({ items: requests } = await get(`/v1/conversations/${encodeURIComponent(
            item.conversation_id)}/children?limit=100`));
        } catch {
          return; // left as it was known; the next refresh asks again
        }
        const children = [...new Set(requests.map((r) => r.child_conversation_id))];
        const before = this.known.get(item.conversation_id);
        if (!before || before.children.join() !== children.join()) this.version += 1;
        this.known.set(item.conversation_id, { at: item.last_activity_us, children });
      }));
    }
  }

  // The items in tree order: each one whose parent is not among them as it comes, its children
  // (in the items' order) under it, theirs under them. [{ item, depth, parent }]
  arrange(items) {
    const parents = new Map();
    for (const [parent, known] of this.known) {
      for (const child of known.children) if (!parents.has(child)) parents.set(child, parent);
    }
    const shown = new Set(items.map((item) => item.conversation_id));
    const below = new Map();
    const roots = [];
    for (const item of items) {
      const parent = parents.get(item.conversation_id);
      if (parent && shown.has(parent)) {
        if (!below.has(parent)) below.set(parent, []);
        below.get(parent).push(item);
      } else {
        roots.push(item);
      }
    }
    const out = [];
    const placed = new Set();
    const walk = (item, depth) => {
      const id = item.conversation_id;
      if (placed.has(id)) return;
      placed.add(id);
      out.push({ item, depth, parent: parents.get(id) || null });
      for (const child of below.get(id) || []) walk(child, depth + 1);
    };
    for (const item of roots) walk(item, 0);
    for (const item of items) walk(item, 0); // never left out, whatever the links say
    return out;
  }
}
