// Drives a kvhost server (KVHOST_URL) with the official openai client, the
// way an agent framework would: structured output parsed with a zod schema,
// streamed tool calls assembled by the client's helpers, and
// tool_choice "required". Every check failure throws; the Go test reads
// the exit status and the last line ("ok ...").
import OpenAI from 'openai';
import { z } from 'zod';
import { zodResponseFormat, zodFunction } from 'openai/helpers/zod';

const client = new OpenAI({ baseURL: process.env.KVHOST_URL + '/v1', apiKey: 'unused', maxRetries: 0 });
const model = 'kvhost';
const messages = [{ role: 'user', content: 'Tell me about a person.' }];
const check = (cond, what) => { if (!cond) throw new Error('check failed: ' + what); };

// 1. chat.completions.parse with a zod schema (response_format json_schema, strict).
const Person = z.object({
  name: z.string().max(16),
  age: z.number().int().min(0).max(120),
  role: z.enum(['admin', 'guest']),
  tags: z.array(z.string().max(6)).max(3),
  manager: z.string().max(10).nullable(),
});
for (let i = 0; i < 5; i++) {
  const r = await client.chat.completions.parse({
    model, messages, temperature: 1, max_tokens: 200,
    response_format: zodResponseFormat(Person, 'person'),
  });
  const msg = r.choices[0].message;
  check(msg.parsed !== null && msg.parsed !== undefined, 'parse returned no object: ' + msg.content);
  Person.parse(msg.parsed); // throws if it does not validate
}

// 2. Streaming tool calls assembled by the client's stream helper.
const Weather = z.object({ city: z.string().max(12), unit: z.enum(['C', 'F']) });
const Time = z.object({ zone: z.string().max(8) });
const tools = [zodFunction({ name: 'get_weather', parameters: Weather }), zodFunction({ name: 'get_time', parameters: Time })];
const stream = client.chat.completions.stream({
  model, messages: [{ role: 'user', content: 'Weather in Oslo?' }], temperature: 1, max_tokens: 200,
  tools, tool_choice: 'required',
});
const final = await stream.finalChatCompletion();
const calls = final.choices[0].message.tool_calls;
check(Array.isArray(calls) && calls.length >= 1, 'no streamed tool call');
check(final.choices[0].finish_reason === 'tool_calls', 'finish_reason ' + final.choices[0].finish_reason);
for (const c of calls) {
  check(typeof c.id === 'string' && c.id.length > 0, 'call without id');
  const schema = c.function.name === 'get_weather' ? Weather : Time;
  schema.parse(JSON.parse(c.function.arguments));
  check(c.function.parsed_arguments !== undefined, 'helper did not parse the arguments');
}

// 3. tool_choice "required" without streaming, then the tool result back.
const r3 = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'What time is it?' }], temperature: 1, max_tokens: 200,
  tools: tools.map(({ type, function: f }) => ({ type, function: { name: f.name, parameters: f.parameters } })),
  tool_choice: 'required',
});
const call = r3.choices[0].message.tool_calls[0];
check(call && r3.choices[0].finish_reason === 'tool_calls', 'required produced no call');
const follow = await client.chat.completions.create({
  model, temperature: 0, max_tokens: 8,
  messages: [{ role: 'user', content: 'What time is it?' }, r3.choices[0].message,
    { role: 'tool', tool_call_id: call.id, content: '12:00' }],
  tools: tools.map(({ type, function: f }) => ({ type, function: { name: f.name, parameters: f.parameters } })),
});
check(typeof follow.choices[0].message.content === 'string' || follow.choices[0].message.tool_calls, 'no reply after the tool result');
console.log('ok parse=5 streamed_calls=' + calls.length + ' required=' + call.function.name);
