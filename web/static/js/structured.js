// Structured chat: a chat card in the playground with a JSON-schema box
// (response_format json_schema, strict) and a tools box (OpenAI tools,
// tool_choice), streaming /v1/chat/completions and showing the reply's
// content and tool calls as they arrive. It injects its own card, so the
// page markup only loads this module.
import { request, sse } from './api.js';
import { el, status } from './format.js';

const sampleSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 120}
  },
  "required": ["name", "age"],
  "additionalProperties": false
}`;

const sampleTools = `[{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
  "required": ["city"], "additionalProperties": false}}}]`;

const history = [];
let controller = null;

// parseBox reads a JSON box; empty means "not set". It throws an Error
// naming the box on bad JSON.
export function parseBox(name, text) {
  if (!text.trim()) return undefined;
  try {
    return JSON.parse(text);
  } catch (e) {
    throw new Error(`${name}: ${e.message}`);
  }
}

// body builds the chat request from the form's values.
export function chatBody(messages, { schema, tools, toolChoice, maxTokens, temperature }) {
  const body = { messages, stream: true, max_tokens: maxTokens, temperature };
  if (schema !== undefined) body.response_format = { type: 'json_schema', json_schema: { name: 'playground', strict: true, schema } };
  if (tools !== undefined) {
    if (!Array.isArray(tools)) throw new Error('tools: expected an array of {"type": "function", "function": {...}}');
    body.tools = tools;
    body.tool_choice = toolChoice;
  }
  return body;
}

function turnNode(role) {
  const content = el('div', { class: 'chat-content output' });
  const calls = el('div', { class: 'chat-calls' });
  const node = el('div', { class: `chat-turn chat-${role}` }, el('span', { class: 'badge' }, role), content, calls);
  document.getElementById('chat-log').append(node);
  return { node, content, calls };
}

function callNode(c) {
  let args = c.function.arguments;
  try { args = JSON.stringify(JSON.parse(args), null, 2); } catch { /* show as sent */ }
  return el('div', { class: 'chat-call', 'data-name': c.function.name },
    el('span', { class: 'badge' }, 'tool call'), ' ', el('b', {}, c.function.name), ' ', el('span', { class: 'sub mono' }, c.id ?? ''),
    el('pre', { class: 'mono' }, args));
}

async function send(ev) {
  ev.preventDefault();
  const st = document.getElementById('chat-status');
  const input = document.getElementById('chat-input');
  let body;
  try {
    const schema = parseBox('JSON schema', document.getElementById('chat-schema').value);
    const tools = parseBox('tools', document.getElementById('chat-tools').value);
    const text = input.value.trim();
    if (!text) throw new Error('type a message');
    history.push({ role: 'user', content: text });
    body = chatBody(history, {
      schema, tools, toolChoice: document.getElementById('chat-tool-choice').value,
      maxTokens: Number(document.getElementById('chat-max').value) || 128,
      temperature: Number(document.getElementById('chat-temp').value),
    });
  } catch (e) {
    status(st, e.message, 'err');
    return;
  }
  turnNode('user').content.textContent = history[history.length - 1].content;
  input.value = '';
  const out = turnNode('assistant');
  const calls = [];
  let content = '';
  let finish = '';
  controller = new AbortController();
  document.getElementById('chat-send').disabled = true;
  status(st, 'generating…');
  try {
    const resp = await request('POST', '/v1/chat/completions', { kind: 'api', body: JSON.stringify(body), contentType: 'application/json', signal: controller.signal });
    for await (const chunk of sse(resp)) {
      if (chunk.error) throw new Error(chunk.error.message);
      const ch = chunk.choices?.[0];
      if (!ch) continue;
      if (ch.delta?.content) {
        content += ch.delta.content;
        out.content.textContent = content;
      }
      for (const d of ch.delta?.tool_calls ?? []) {
        const c = calls[d.index] ??= { id: d.id, type: 'function', function: { name: d.function?.name ?? '', arguments: '' } };
        if (d.function?.name) c.function.name = d.function.name;
        c.function.arguments += d.function?.arguments ?? '';
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
    out.calls.replaceChildren(...calls.map(callNode));
    const msg = { role: 'assistant', content: content || null };
    if (calls.length) msg.tool_calls = calls;
    history.push(msg);
    out.node.dataset.finish = finish;
    status(st, `done (${finish || 'no finish reason'})`, 'ok');
  } catch (e) {
    history.pop();
    out.content.textContent = content;
    out.content.append(el('span', { class: 'err' }, ` [${e.message}]`));
    status(st, e.message, 'err');
  } finally {
    controller = null;
    document.getElementById('chat-send').disabled = false;
  }
}

function card() {
  return el('div', { class: 'card', id: 'chat-card' },
    el('h2', {}, 'Chat with structured output and tools'),
    el('p', { class: 'sub' }, 'A JSON schema constrains the reply (response_format json_schema, strict); tools let the model call functions (tool_choice "required" forces a call). Both boxes are optional.'),
    el('div', { class: 'grid2' },
      el('label', { class: 'block' }, 'JSON schema', el('textarea', { id: 'chat-schema', rows: '6', class: 'mono', placeholder: sampleSchema })),
      el('label', { class: 'block' }, 'Tools', el('textarea', { id: 'chat-tools', rows: '6', class: 'mono', placeholder: sampleTools }))),
    el('div', { id: 'chat-log', class: 'chat-log' }),
    el('form', { id: 'chat-form', novalidate: '' },
      el('label', { class: 'block' }, 'Message', el('textarea', { id: 'chat-input', rows: '2' })),
      el('div', { class: 'row' },
        el('label', {}, 'tool_choice', el('select', { id: 'chat-tool-choice' }, el('option', {}, 'auto'), el('option', {}, 'required'), el('option', {}, 'none'))),
        el('label', {}, 'max_tokens', el('input', { id: 'chat-max', type: 'number', min: '1', max: '4096', value: '128' })),
        el('label', {}, 'temperature', el('input', { id: 'chat-temp', type: 'number', min: '0', max: '2', step: '0.1', value: '0.7' })),
        el('button', { type: 'submit', id: 'chat-send' }, 'Send'),
        el('button', { type: 'button', id: 'chat-clear', class: 'ghost' }, 'New chat'),
        el('span', { id: 'chat-status', class: 'status', role: 'status' }))));
}

export function startStructuredChat() {
  const section = document.getElementById('playground');
  if (!section || document.getElementById('chat-card')) return;
  section.append(card());
  document.getElementById('chat-form').addEventListener('submit', send);
  document.getElementById('chat-clear').addEventListener('click', () => {
    controller?.abort();
    history.length = 0;
    document.getElementById('chat-log').replaceChildren();
    status(document.getElementById('chat-status'), '');
  });
}

startStructuredChat();
