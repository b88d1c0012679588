// A stock AG-UI client (@ag-ui/client's HttpAgent) driving one thread through a list of steps.
//
//   node client.mjs PREFIX URL TOKEN THREAD STEPS_JSON
//
// PREFIX is where npm installed @ag-ui/client (its --prefix).
//
// Each step is {"message": "..."} (a user message, then a run), {"resume": true|false}
// (answer every open interrupt: approve or deny), {"answer": {...}} (answer every open
// interrupt with this payload: a question's form), or {} (a run with nothing new); with
// "dropAfter": N the connection is dropped after the Nth text piece, and with "cursor": true
// the run resumes after the last position seen (forwardedProps.tidings.after), or with
// "header": true as a Last-Event-ID header. Prints one JSON line per event the agent saw
// ({"step", "event"}) and one per step's end ({"step", "end": {outcome, interrupts, error,
// messages}}).
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";

const [prefix, url, token, thread, stepsJson] = process.argv.slice(2);
const require = createRequire(`${prefix}/`);
const { HttpAgent } = require("@ag-ui/client");

const agent = new HttpAgent({ url, threadId: thread, headers: { Authorization: `Bearer ${token}` } });
const print = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

let last = null; // the last position an event carried
let interrupts = [];

for (const [index, step] of JSON.parse(stepsJson).entries()) {
  if (step.message !== undefined) {
    agent.addMessage({ id: randomUUID(), role: "user", content: step.message });
  }
  const parameters = {};
  if (step.resume !== undefined) {
    parameters.resume = interrupts.map((i) => ({
      interruptId: i.id, status: "resolved", payload: { approved: step.resume } }));
  }
  if (step.answer !== undefined) {
    parameters.resume = interrupts.map((i) => ({
      interruptId: i.id, status: "resolved", payload: step.answer }));
  }
  if (step.cursor && last !== null) {
    parameters.forwardedProps = { tidings: { after: last } };
  }
  agent.headers = { Authorization: `Bearer ${token}` };
  if (step.header && last !== null) {
    agent.headers["Last-Event-ID"] = String(last);
  }
  let pieces = 0;
  let outcome = null;
  let error = null;
  interrupts = [];
  try {
    await agent.runAgent(parameters, {
      onEvent({ event }) {
        print({ step: index, event });
        const seq = event.metadata?.tidings?.seq;
        if (seq !== undefined) last = seq;
        if (event.type === "TEXT_MESSAGE_CONTENT" && step.dropAfter !== undefined
            && ++pieces >= step.dropAfter) {
          agent.abortRun(); // the connection drops mid-answer
        }
      },
      onRunFinishedEvent(params) {
        outcome = params.outcome;
        if (params.outcome === "interrupt") interrupts = params.interrupts;
      },
      onRunErrorEvent({ event }) {
        error = event.message;
      },
    });
  } catch (thrown) {
    error = String(thrown?.message ?? thrown);
  }
  print({ step: index, end: { outcome, interrupts, error, messages: agent.messages } });
}
