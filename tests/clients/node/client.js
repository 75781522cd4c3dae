// Drives the gateway with the official Node client (@google-cloud/pubsub), for
// tests/e2e/test_official_clients.py. The client finds the gateway through
// PUBSUB_EMULATOR_HOST, as users point it at an emulator.
//
//   node client.js SCENARIO --project P [--topic T] [--subscription S] [scenario flags...]
//
// Each scenario prints one JSON object on stdout; errors go to stderr with a non-zero exit. The
// scenarios, their flags and their JSON are the same in the Go, Java and Node programs.
'use strict';

// The auth library asks whether it runs on Google Cloud by probing the metadata server, even
// against an emulator; this program never does, so it says so and nothing is probed.
process.env.METADATA_SERVER_DETECTION ??= 'none';

const {PubSub} = require('@google-cloud/pubsub');

// gRPC status codes by number, named as the Go and Java programs print them.
const CODES = [
  'OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND',
  'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED',
  'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED',
];

const LANG = 'node';

function parseFlags(list) {
  const flags = {};
  for (let i = 0; i < list.length; i += 2) {
    if (!list[i].startsWith('--') || i + 1 >= list.length) {
      throw new Error(`expected --name value pairs, got ${list.slice(i).join(' ')}`);
    }
    flags[list[i].slice(2)] = list[i + 1];
  }
  return {
    str(name) {
      if (!(name in flags)) throw new Error(`--${name} is required`);
      return flags[name];
    },
    num(name, dflt) {
      if (!(name in flags)) return dflt;
      const n = Number.parseInt(flags[name], 10);
      if (Number.isNaN(n)) throw new Error(`--${name}: not a number: ${flags[name]}`);
      return n;
    },
    raw: flags,
  };
}

const sorted = obj => Object.fromEntries(Object.entries(obj || {}).sort(([a], [b]) => (a < b ? -1 : 1)));

function topicJson(t) {
  return {name: t.name, labels: sorted(t.labels)};
}

function subscriptionJson(s) {
  return {
    name: s.name,
    topic: s.topic,
    ack_deadline_seconds: s.ackDeadlineSeconds,
    labels: sorted(s.labels),
    enable_message_ordering: Boolean(s.enableMessageOrdering),
    enable_exactly_once_delivery: Boolean(s.enableExactlyOnceDelivery),
  };
}

async function topicListed(pubsub, name) {
  const [topics] = await pubsub.getTopics({autoPaginate: true});
  return topics.some(t => t.name === name);
}

async function subscriptionListed(pubsub, name) {
  const [subs] = await pubsub.getSubscriptions({autoPaginate: true});
  return subs.some(s => s.name === name);
}

// Creates a topic and a subscription, reads and lists them, updates the subscription.
async function adminCreate(pubsub, f) {
  const topicName = f.str('topic');
  const subName = f.str('subscription');
  const [topic] = await pubsub.createTopic({name: topicName, labels: {lang: LANG}});
  const [gotTopic] = await topic.getMetadata();
  const tListed = await topicListed(pubsub, topicName);
  const [sub] = await topic.createSubscription(subName, {ackDeadlineSeconds: 15, labels: {lang: LANG}});
  const [gotSub] = await sub.getMetadata();
  const sListed = await subscriptionListed(pubsub, subName);
  // setMetadata sends UpdateSubscription with a mask of the fields given.
  const [updated] = await sub.setMetadata({ackDeadlineSeconds: 42, labels: {lang: LANG, updated: 'yes'}});
  return {
    topic: topicJson(gotTopic),
    topic_listed: tListed,
    subscription: subscriptionJson(gotSub),
    subscription_listed: sListed,
    updated: subscriptionJson(updated),
  };
}

// The gRPC code a call ended with, by its name: OK, NOT_FOUND.
async function codeOf(call) {
  try {
    await call();
    return 'OK';
  } catch (err) {
    if (typeof err.code !== 'number') throw err;
    return CODES[err.code] || `CODE_${err.code}`;
  }
}

// Deletes the subscription and the topic, then reads and lists them again.
async function adminDelete(pubsub, f) {
  const topicName = f.str('topic');
  const subName = f.str('subscription');
  await pubsub.subscription(subName).delete();
  await pubsub.topic(topicName).delete();
  return {
    get_subscription: await codeOf(() => pubsub.subscription(subName).getMetadata()),
    get_topic: await codeOf(() => pubsub.topic(topicName).getMetadata()),
    topic_listed: await topicListed(pubsub, topicName),
    subscription_listed: await subscriptionListed(pubsub, subName),
  };
}

// Publishes --per-key messages for each of --keys ordering keys (interleaved), with message
// ordering enabled on the publisher, and --unkeyed messages without a key.
async function publish(pubsub, f) {
  const topic = pubsub.topic(f.str('topic'), {messageOrdering: true});
  const pending = [];
  const keys = f.num('keys', 0);
  for (let i = 0; i < f.num('per-key', 0); i++) {
    for (let k = 0; k < keys; k++) {
      const key = `k${k}`;
      const data = `${key}:${i}`;
      const attributes = {lang: LANG, key, seq: String(i)};
      pending.push([data, topic.publishMessage({data: Buffer.from(data), attributes, orderingKey: key})]);
    }
  }
  for (let j = 0; j < f.num('unkeyed', 0); j++) {
    const data = `free:${j}`;
    pending.push([data, topic.publishMessage({data: Buffer.from(data), attributes: {lang: LANG, seq: String(j)}})]);
  }
  const ids = {};
  for (const [data, promise] of pending) {
    ids[data] = await promise;
  }
  await topic.flush();
  return {ids: sorted(ids)};
}

function ackName(response) {
  return response === 'SUCCESS' ? 'SUCCESS' : String(response);
}

// Runs StreamingPull (a Subscription's 'message' events) until --expect distinct messages were
// acked, then --grace-ms more to catch redeliveries. Each message is settled --hold-ms after its
// event, so that the client's flow control alone limits how many are out; the first delivery of
// each message named in --nack is nacked. With --ack-result 1 the acks use ackWithResponse and
// report its AckResponse.
async function receive(pubsub, f) {
  const expect = f.num('expect', 0);
  const hold = f.num('hold-ms', 0);
  const grace = f.num('grace-ms', 1000);
  const timeout = f.num('timeout-s', 60);
  const withResult = f.num('ack-result', 0) === 1;
  const toNack = new Set((f.raw.nack || '').split(',').filter(Boolean));
  const max = f.num('max-outstanding', 0);
  const options = {streamingOptions: {maxStreams: 1}};
  if (max > 0) {
    // allowExcessMessages false: messages past maxMessages wait inside the client, not in the
    // handler.
    options.flowControl = {maxMessages: max, allowExcessMessages: false};
  }
  const subscription = pubsub.subscription(f.str('subscription'), options);
  const deliveries = [];
  const acked = [];
  const nacked = [];
  const ackResults = {};
  const confirmed = new Set();
  let outstanding = 0;
  let maxOutstanding = 0;
  let reachedResolve;
  const reached = new Promise(resolve => {
    reachedResolve = resolve;
  });
  const noteConfirmed = data => {
    confirmed.add(data);
    if (confirmed.size >= expect) reachedResolve(true);
  };
  const started = Date.now();
  const log = what => process.stderr.write(`receive: ${what} after ${((Date.now() - started) / 1000).toFixed(2)} s\n`);
  let failure = null;
  subscription.on('error', err => {
    failure = err;
    reachedResolve(false);
  });

  const settle = message => {
    const data = message.data.toString('utf8');
    const nack = toNack.delete(data);
    outstanding--; // before the client hears of it
    (nack ? nacked : acked).push(data);
    if (nack) {
      message.nack();
    } else if (withResult) {
      message.ackWithResponse().then(
        response => {
          ackResults[data] = ackName(response);
          noteConfirmed(data);
        },
        err => {
          ackResults[data] = `OTHER: ${err}`;
          noteConfirmed(data);
        },
      );
    } else {
      message.ack();
      noteConfirmed(data);
    }
  };
  subscription.on('message', message => {
    deliveries.push({
      data: message.data.toString('utf8'),
      attributes: sorted(message.attributes),
      ordering_key: message.orderingKey || '',
      message_id: message.id,
    });
    if (deliveries.length === 1) log('first message');
    outstanding++;
    maxOutstanding = Math.max(maxOutstanding, outstanding);
    if (hold > 0) {
      setTimeout(() => settle(message), hold);
    } else {
      settle(message);
    }
  });

  let timer;
  const timedOut = !(await Promise.race([
    reached,
    new Promise(resolve => {
      timer = setTimeout(() => resolve(false), timeout * 1000);
    }),
  ]));
  clearTimeout(timer);
  log(timedOut ? 'timed out' : 'all confirmed');
  if (failure) throw failure;
  if (!timedOut) await new Promise(resolve => setTimeout(resolve, grace));
  await subscription.close();
  log('stopped');
  return {
    deliveries,
    acked,
    nacked,
    ack_results: sorted(ackResults),
    max_outstanding: maxOutstanding,
    timed_out: timedOut,
  };
}

async function main() {
  const [scenario, ...rest] = process.argv.slice(2);
  if (!scenario) throw new Error('usage: client.js SCENARIO --project P [--name value ...]');
  if (!process.env.PUBSUB_EMULATOR_HOST) throw new Error('PUBSUB_EMULATOR_HOST is not set');
  const f = parseFlags(rest);
  const pubsub = new PubSub({projectId: f.str('project')});
  const scenarios = {'admin-create': adminCreate, 'admin-delete': adminDelete, publish, receive};
  if (!(scenario in scenarios)) throw new Error(`unknown scenario ${scenario}`);
  try {
    const result = await scenarios[scenario](pubsub, f);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    await pubsub.close();
  }
}

main().then(
  () => process.exit(0),
  err => {
    process.stderr.write(`error: ${err && err.stack ? err.stack : err}\n`);
    process.exit(1);
  },
);
