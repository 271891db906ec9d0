#!/usr/bin/env node
// Runs the pure-JavaScript Pulsar client pulsar-flex against a running standalone and prints one
// table row per case. Usage: node cases.js <broker host:port> <web http://host:port>
// Driven by run.py, which starts the standalone; for the "restart" case this script prints
// "RESTART" on stdout and waits for one line on stdin (the standalone is back).
'use strict';

const http = require('http');
const readline = require('readline');
const { Producer, Consumer, logLevel } = require('pulsar-flex');

const [broker, web] = process.argv.slice(2);
const NS = 'public/default';
const RUN = Date.now().toString(36);
const quiet = () => () => {};
const common = { discoveryServers: [broker], logLevel: logLevel.NOTHING, logCreator: quiet };

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let stdinLines = null;

function admin(method, path, body) {
  return new Promise((resolve, reject) => {
    const url = new URL(path, web);
    const data = body === undefined ? null : JSON.stringify(body);
    const req = http.request(url, {
      method,
      headers: data ? { 'Content-Type': 'application/json' } : {},
    }, (res) => {
      let text = '';
      res.on('data', (chunk) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode, body: text ? safeJson(text) : null }));
    });
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

function safeJson(text) {
  try { return JSON.parse(text); } catch (e) { return text; }
}

function topicName(name) {
  return `persistent://${NS}/flex-${RUN}-${name}`;
}

async function producer(topic) {
  const p = new Producer({ ...common, topic, producerAccessMode: Producer.ACCESS_MODES.SHARED });
  await p.create();
  return p;
}

// A consumer whose messages land in `got` ({payload, properties, redeliveryCount, ack}).
async function consumer(topic, subscription, subType, { autoAck = true, name } = {}) {
  const c = new Consumer({
    ...common, topic, subscription, subType, consumerName: name || `${subscription}-${Math.random()}`,
    initialPosition: Consumer.INITIAL_POSITION.EARLIEST, receiveQueueSize: 100,
    reconnectInterval: 500,
  });
  c.got = [];
  await c.subscribe();
  await c.run({
    autoAck,
    onMessage: async ({ message, properties, redeliveryCount, ack, command }) => {
      c.got.push({ payload: message.toString(), size: message.length, properties, redeliveryCount,
                   ack, messageId: command.messageId });
    },
  });
  return c;
}

async function waitFor(predicate, timeoutMs = 15000) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (predicate()) return true;
    await sleep(100);
  }
  return predicate();
}

async function subscriptionStats(topic, subscription) {
  const path = `/admin/v2/${topic.replace('://', '/')}/stats`;
  const { body } = await admin('GET', path);
  return body && body.subscriptions ? body.subscriptions[subscription] : undefined;
}

async function stop(...things) {
  for (const thing of things) {
    try {
      if (thing instanceof Consumer) await thing.unsubscribe();
      else await thing.close();
    } catch (e) { /* already gone */ }
  }
}

function expect(condition, message) {
  if (!condition) throw new Error(message);
}

const CASES = {
  async connect() {
    const topic = topicName('connect');
    const p = await producer(topic);
    const c = await consumer(topic, 'sub', Consumer.SUB_TYPES.EXCLUSIVE);
    await p.sendMessage({ payload: 'hello', properties: { k: 'v' } });
    expect(await waitFor(() => c.got.length === 1), `received ${c.got.length} of 1`);
    expect(c.got[0].payload === 'hello' && c.got[0].properties.k === 'v', 'payload/properties differ');
    await stop(p, c);
    return 'produce + consume one message with a property';
  },

  async exclusive() {
    const topic = topicName('exclusive');
    const first = await consumer(topic, 'sub', Consumer.SUB_TYPES.EXCLUSIVE);
    let refused = null;
    try {
      await consumer(topic, 'sub', Consumer.SUB_TYPES.EXCLUSIVE);
    } catch (e) { refused = e; }
    expect(refused, 'a second Exclusive consumer was accepted');
    const p = await producer(topic);
    for (let i = 0; i < 5; i++) await p.sendMessage({ payload: `m${i}` });
    expect(await waitFor(() => first.got.length === 5), `first got ${first.got.length} of 5`);
    await stop(p, first);
    return `second consumer refused (${String(refused.message || refused).slice(0, 60)})`;
  },

  async shared() {
    const topic = topicName('shared');
    const a = await consumer(topic, 'sub', Consumer.SUB_TYPES.SHARED);
    const b = await consumer(topic, 'sub', Consumer.SUB_TYPES.SHARED);
    const p = await producer(topic);
    for (let i = 0; i < 40; i++) await p.sendMessage({ payload: `m${i}` });
    expect(await waitFor(() => a.got.length + b.got.length === 40), `got ${a.got.length + b.got.length} of 40`);
    const all = new Set([...a.got, ...b.got].map((m) => m.payload));
    expect(all.size === 40, `duplicates: ${all.size} distinct`);
    expect(a.got.length > 0 && b.got.length > 0, `one consumer got nothing: ${a.got.length}/${b.got.length}`);
    await stop(p, a, b);
    return `40 messages split ${a.got.length}/${b.got.length}, no duplicate`;
  },

  async failover() {
    const topic = topicName('failover');
    const a = await consumer(topic, 'sub', Consumer.SUB_TYPES.FAILOVER, { name: 'a' });
    const b = await consumer(topic, 'sub', Consumer.SUB_TYPES.FAILOVER, { name: 'b' });
    const p = await producer(topic);
    for (let i = 0; i < 20; i++) await p.sendMessage({ payload: `m${i}` });
    expect(await waitFor(() => a.got.length + b.got.length === 20), `got ${a.got.length + b.got.length} of 20`);
    expect(a.got.length === 0 || b.got.length === 0, `both consumers got messages: ${a.got.length}/${b.got.length}`);
    const active = a.got.length ? a : b;
    const standby = active === a ? b : a;
    await active.unsubscribe().catch(() => {});
    for (let i = 20; i < 25; i++) await p.sendMessage({ payload: `m${i}` });
    const moved = await waitFor(() => standby.got.length >= 5);
    await stop(p, standby);
    expect(moved, `standby got ${standby.got.length} of 5 after the active left`);
    return `20 to the active consumer only; after it left, 5 to the standby`;
  },

  async key_shared() {
    const topic = topicName('key-shared');
    const a = await consumer(topic, 'sub', Consumer.SUB_TYPES.KEY_SHARED);
    const b = await consumer(topic, 'sub', Consumer.SUB_TYPES.KEY_SHARED);
    const p = await producer(topic);
    for (let i = 0; i < 20; i++) await p.sendMessage({ payload: `m${i}` });
    expect(await waitFor(() => a.got.length + b.got.length === 20), `got ${a.got.length + b.got.length} of 20`);
    // pulsar-flex sends no keys: every message hashes as Pulsar's NONE_KEY, so one consumer.
    expect(a.got.length === 0 || b.got.length === 0, `keyless messages split ${a.got.length}/${b.got.length}`);
    const order = (a.got.length ? a : b).got.map((m) => m.payload).join(',');
    expect(order === [...Array(20).keys()].map((i) => `m${i}`).join(','), 'order broken');
    await stop(p, a, b);
    return `20 keyless messages to one consumer, in order (${a.got.length}/${b.got.length})`;
  },

  async acks() {
    const topic = topicName('acks');
    const c = await consumer(topic, 'sub', Consumer.SUB_TYPES.SHARED, { autoAck: false });
    const p = await producer(topic);
    for (let i = 0; i < 10; i++) await p.sendMessage({ payload: `m${i}` });
    expect(await waitFor(() => c.got.length === 10), `got ${c.got.length} of 10`);
    for (const m of c.got.slice(0, 6)) await m.ack();
    await sleep(300);
    const six = await subscriptionStats(topic, 'sub');
    expect(six && six.msgBacklog === 4, `backlog after 6 individual acks: ${six && six.msgBacklog}`);
    const cumulative = await consumer(topicName('acks-cumulative'), 'sub', Consumer.SUB_TYPES.EXCLUSIVE,
                                      { autoAck: false });
    const p2 = await producer(topicName('acks-cumulative'));
    for (let i = 0; i < 10; i++) await p2.sendMessage({ payload: `m${i}` });
    expect(await waitFor(() => cumulative.got.length === 10), `cumulative got ${cumulative.got.length}`);
    await cumulative.got[9].ack({ type: Consumer.ACK_TYPES.CUMULATIVE });
    await sleep(300);
    const stats = await subscriptionStats(topicName('acks-cumulative'), 'sub');
    expect(stats && stats.msgBacklog === 0, `backlog after cumulative ack: ${stats && stats.msgBacklog}`);
    await stop(p, p2, c, cumulative);
    return 'individual acks: backlog 10 -> 4; cumulative ack of the 10th: backlog 0';
  },

  async nacks() {
    const topic = topicName('nacks');
    const c = await consumer(topic, 'sub', Consumer.SUB_TYPES.SHARED, { autoAck: false });
    const p = await producer(topic);
    await p.sendMessage({ payload: 'again' });
    expect(await waitFor(() => c.got.length === 1), 'first delivery missing');
    await c.got[0].ack({ type: Consumer.ACK_TYPES.NEGATIVE });
    expect(await waitFor(() => c.got.length >= 2), 'no redelivery after the negative ack');
    const again = c.got[1];
    expect(again.payload === 'again', 'another message redelivered');
    await again.ack();
    await stop(p, c);
    return `redelivered after the negative ack, redeliveryCount ${again.redeliveryCount}`;
  },

  async batches() {
    const topic = topicName('batches');
    const c = await consumer(topic, 'sub', Consumer.SUB_TYPES.EXCLUSIVE);
    const p = await producer(topic);
    const messages = [...Array(10).keys()].map((i) => ({ payload: `b${i}`, properties: { i: String(i) } }));
    await p.sendBatch({ messages });
    expect(await waitFor(() => c.got.length === 10), `got ${c.got.length} of 10`);
    const ok = c.got.every((m, i) => m.payload === `b${i}` && m.properties.i === String(i));
    expect(ok, 'batch content or order differs');
    await sleep(300);
    const stats = await subscriptionStats(topic, 'sub');
    await stop(p, c);
    return `one batch of 10 -> 10 messages in order with properties; backlog ${stats && stats.msgBacklog}`;
  },

  async large_messages() {
    const topic = topicName('large');
    const c = await consumer(topic, 'sub', Consumer.SUB_TYPES.EXCLUSIVE);
    const p = await producer(topic);
    const sizes = [1024 * 1024, 4 * 1024 * 1024];
    for (const size of sizes) {
      const sent = p.sendMessage({ payload: Buffer.alloc(size, 'x') });
      const ok = await Promise.race([sent.then(() => true), sleep(20000).then(() => false)]);
      expect(ok, `send of ${size} bytes got no receipt in 20 s`);
    }
    expect(await waitFor(() => c.got.length === 2, 30000), `got ${c.got.length} of 2`);
    expect(c.got[0].size === sizes[0] && c.got[1].size === sizes[1], 'sizes differ');
    // Over maxMessageSize (5 MiB): pulsar-flex checks nothing itself, so the broker must refuse.
    const over = p.sendMessage({ payload: Buffer.alloc(6 * 1024 * 1024, 'y') });
    const outcome = await Promise.race([
      over.then(() => 'accepted', (e) => `refused (${String(e.message || e).slice(0, 50)})`),
      sleep(10000).then(() => 'no answer in 10 s (pulsar-flex re-queues it forever)'),
    ]);
    await stop(p, c);
    return `1 MiB and 4 MiB round trip; 6 MiB: ${outcome}`;
  },

  async partitions() {
    const base = topicName('partitioned');
    const path = `/admin/v2/${base.replace('://', '/')}/partitions`;
    const created = await admin('PUT', path, 3);
    expect(created.status === 204, `create partitioned topic: HTTP ${created.status}`);
    const meta = await admin('GET', path);
    expect(meta.body && meta.body.partitions === 3, `metadata: ${JSON.stringify(meta.body)}`);
    const received = [];
    for (let i = 0; i < 3; i++) {
      const topic = `${base}-partition-${i}`;
      const c = await consumer(topic, 'sub', Consumer.SUB_TYPES.EXCLUSIVE);
      const p = await producer(topic);
      await p.sendMessage({ payload: `p${i}` });
      expect(await waitFor(() => c.got.length === 1), `partition ${i}: nothing received`);
      received.push(c.got[0].payload);
      await stop(p, c);
    }
    let beyond = null;
    try {
      const extra = await producer(`${base}-partition-3`);
      await stop(extra);
    } catch (e) { beyond = e; }
    // Pulsar refuses a partition index beyond the partitioned topic's count.
    expect(beyond, `3 partitions produced/consumed (${received.join(',')}), but -partition-3 was ACCEPTED`);
    return `3 partitions, each -partition-i produced/consumed (${received.join(',')}); ` +
      `-partition-3 refused (${String(beyond.message || beyond).slice(0, 50)})`;
  },

  async reconnect_unload() {
    const topic = topicName('unload');
    const c = await consumer(topic, 'sub', Consumer.SUB_TYPES.SHARED);
    const p = await producer(topic);
    await p.sendMessage({ payload: 'before' });
    expect(await waitFor(() => c.got.length === 1), 'before-unload message missing');
    const unloaded = await admin('PUT', `/admin/v2/${topic.replace('://', '/')}/unload`);
    expect(unloaded.status === 204, `unload: HTTP ${unloaded.status}`);
    await sleep(1500);
    await p.sendMessage({ payload: 'after' });
    expect(await waitFor(() => c.got.some((m) => m.payload === 'after'), 20000),
           `after-unload message missing (${c.got.map((m) => m.payload)})`);
    await stop(p, c);
    return 'producer and consumer carry on after the topic is unloaded';
  },

  async reconnect_restart() {
    const topic = topicName('restart');
    const c = await consumer(topic, 'sub', Consumer.SUB_TYPES.SHARED);
    const p = await producer(topic);
    await p.sendMessage({ payload: 'before' });
    expect(await waitFor(() => c.got.length === 1), 'before-restart message missing');
    process.stdout.write('RESTART\n');
    await stdinLines.next();
    const sent = p.sendMessage({ payload: 'after' });
    const done = await Promise.race([sent.then(() => true), sleep(30000).then(() => false)]);
    expect(done, 'send after the restart did not complete');
    expect(await waitFor(() => c.got.some((m) => m.payload === 'after'), 30000),
           `after-restart message missing (${c.got.map((m) => m.payload)})`);
    await stop(p, c);
    return 'producer and consumer reconnect after the standalone restarts (same data)';
  },
};

async function main() {
  stdinLines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  const only = process.env.FLEX_CASES ? process.env.FLEX_CASES.split(',') : Object.keys(CASES);
  const rows = [];
  for (const name of only) {
    const started = Date.now();
    let status = 'PASS';
    let detail;
    try {
      detail = await Promise.race([
        CASES[name](),
        sleep(90000).then(() => { throw new Error('timed out after 90 s'); }),
      ]);
    } catch (e) {
      status = 'FAIL';
      detail = String(e && e.message ? e.message : e);
    }
    rows.push({ name, status, seconds: ((Date.now() - started) / 1000).toFixed(1), detail });
    process.stdout.write(`CASE ${name} ${status} ${detail}\n`);
  }
  process.stdout.write('\n| case | result | s | detail |\n|---|---|---|---|\n');
  for (const r of rows) process.stdout.write(`| ${r.name} | ${r.status} | ${r.seconds} | ${r.detail} |\n`);
  const failed = rows.filter((r) => r.status !== 'PASS').length;
  process.stdout.write(`\n${rows.length - failed} passed, ${failed} failed\n`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.error(e); process.exit(2); });
