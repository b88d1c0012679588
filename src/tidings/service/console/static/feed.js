// A conversation's event feed, read with fetch() so that the token travels in a header
// (EventSource cannot send one). Server-Sent Events are parsed here; on a lost connection or
// a server restart the feed reconnects with Last-Event-ID, the last journal sequence seen, and
// the server sends every event after it once, then the answer in progress.

import { ROOT, headers, problemOf } from './api.js';

const NEWLINE = /\r\n|\r|\n/;

// Calls dispatch(event) for every complete SSE event of the stream; returns when it ends.
export async function readEvents(body, dispatch) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    for (;;) {
      const found = NEWLINE.exec(buffer);
      if (found === null) break;
      // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
      if (found[0] === '\r' && found.index === buffer.length - 1) break;
      const line = buffer.slice(0, found.index);
      buffer = buffer.slice(found.index + found[0].length);
      if (line === '') {
        if (data.length) dispatch(JSON.parse(data.join('\n')));
        data = [];
      } else if (!line.startsWith(':')) { // a comment is a keep-alive
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? '' : line.slice(colon + 1);
        if (text.startsWith(' ')) text = text.slice(1);
        if (field === 'data') data.push(text); // id and event are in the JSON too
      }
    }
  }
}

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// Follows a conversation's feed from `after` until stop(). onEvent gets every event;
// onState('connecting' | 'live' | 'reconnecting'); onGone(error) when the feed is refused
// (not found, or the token is no longer accepted): it is not retried then.
export function follow(conversationId, { after = 0, onEvent, onState, onGone }) {
  const control = new AbortController();
  const path = `/v1/conversations/${encodeURIComponent(conversationId)}/events`;
  let last = after;
  let stopped = false;
  (async () => {
    let pause = 200;
    while (!stopped) {
      try {
        if (onState) onState('connecting');
        const response = await fetch(ROOT + path, {
          headers: headers({ Accept: 'text/event-stream', 'Last-Event-ID': String(last) }),
          signal: control.signal,
          cache: 'no-store',
        });
        if (!response.ok) {
          const error = await problemOf(response);
          if ([401, 403, 404].includes(response.status)) {
            if (onGone) onGone(error);
            return;
          }
          throw error;
        }
        if (onState) onState('live');
        pause = 200;
        await readEvents(response.body, (event) => {
          if (event.seq !== null && event.seq !== undefined) last = event.seq;
          onEvent(event);
        });
      } catch (error) {
        if (stopped) return;
      }
      if (stopped) return;
      if (onState) onState('reconnecting');
      await sleep(pause);
      pause = Math.min(pause * 2, 5000);
    }
  })();
  return {
    stop() {
      stopped = true;
      control.abort();
    },
    get last() { return last; },
  };
}
