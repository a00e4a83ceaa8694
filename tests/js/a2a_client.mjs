// The A2A JavaScript SDK (@a2a-js/sdk) as a client of the gateway: one scenario per
// run, chosen by the first argument; prints one JSON object of what it saw, which
// the Python test asserts on. Usage: node a2a_client.mjs SCENARIO BASE_URL [ARG]
// A2A_TRANSPORT=HTTP+JSON picks the REST binding from the card (default JSONRPC).
import {
  ClientFactory,
  ClientFactoryOptions,
  JsonRpcTransportFactory,
  RestTransportFactory,
  createAuthenticatingFetchWithRetry,
} from "@a2a-js/sdk/client";
import { Role, TaskState } from "@a2a-js/sdk";
// OAuth discovery and the client-credentials grant: the official MCP client's
// (installed with the MCP inspector), as any OAuth client would do it
import {
  ClientCredentialsProvider,
  auth,
  extractWWWAuthenticateParams,
} from "@modelcontextprotocol/client";
import { randomUUID } from "node:crypto";

const [scenario, base, arg] = process.argv.slice(2);

function message(text, extra = {}) {
  return {
    messageId: randomUUID(),
    contextId: "",
    taskId: "",
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text }, metadata: undefined }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
    ...extra,
  };
}

function request(msg) {
  return { tenant: "", message: msg, configuration: undefined, metadata: undefined };
}

const stateName = (s) => TaskState[s] ?? String(s);

function texts(task) {
  return (task.artifacts ?? []).flatMap((a) => a.parts.map((p) => p.content?.value));
}

function summary(task) {
  return {
    id: task.id,
    contextId: task.contextId,
    state: stateName(task.status?.state),
    artifacts: texts(task),
    statusText: (task.status?.message?.parts ?? []).map((p) => p.content?.value),
  };
}

function event(e) {
  const p = e.payload;
  if (!p) return { kind: "none" };
  if (p.$case === "task") return { kind: "task", ...summary(p.value) };
  if (p.$case === "statusUpdate") {
    return { kind: "status", taskId: p.value.taskId, state: stateName(p.value.status?.state) };
  }
  if (p.$case === "artifactUpdate") {
    return {
      kind: "artifact",
      taskId: p.value.taskId,
      texts: p.value.artifact.parts.map((x) => x.content?.value),
    };
  }
  return { kind: p.$case };
}

const transport = process.env.A2A_TRANSPORT ?? "JSONRPC";
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    preferredTransports: [transport],
  }),
);

// the agent's URL with its slash: the SDK resolves the card's relative path against it
async function client(agent) {
  const c = await factory.createFromUrl(`${base}/a2a/${agent}/`);
  if (c.transport.protocolName !== transport) {
    throw new Error(`the SDK chose ${c.transport.protocolName}, not ${transport}`);
  }
  return c;
}

async function errorOf(fn) {
  try {
    await fn();
    return null;
  } catch (e) {
    return { name: e.constructor?.name, message: String(e.message ?? e) };
  }
}

const scenarios = {
  // the gateway's own card at the site root, then one agent's card and a send,
  // a get, a list filtered by context, errors for an unknown task
  async send() {
    const root = await fetch(`${base}/.well-known/agent-card.json`).then((r) => r.json());
    // given the agent's URL without its slash, the SDK lands on the gateway's card
    const slashless = await new ClientFactory().createFromUrl(`${base}/a2a/gw-echo`);
    const wrong = await errorOf(() => slashless.sendMessage(request(message("lost"))));
    const c = await client("gw-echo");
    const sent = await c.sendMessage(request(message("hello from js")));
    const task = sent.payload?.$case === "task" ? sent.payload.value : sent;
    const got = await c.getTask({ tenant: "", id: task.id, historyLength: undefined });
    const listed = await c.listTasks({
      tenant: "",
      contextId: task.contextId,
      status: TaskState.TASK_STATE_UNSPECIFIED,
      pageSize: undefined,
      pageToken: "",
      historyLength: undefined,
      statusTimestampAfter: undefined,
      includeArtifacts: true,
    });
    const unknown = await errorOf(() =>
      c.getTask({ tenant: "", id: "no-such-task", historyLength: undefined }),
    );
    return {
      rootCard: { name: root.name, skills: (root.skills ?? []).map((s) => s.id) },
      wrong,
      sent: summary(task),
      got: summary(got),
      listed: listed.tasks.map((t) => t.id),
      unknown,
    };
  },

  // streamed chunks, then the finished task read back
  async stream() {
    const c = await client("gw-streamer");
    const events = [];
    for await (const e of c.sendMessageStream(request(message("alpha beta gamma")))) {
      events.push(event(e));
    }
    const got = await c.getTask({ tenant: "", id: events[0].id, historyLength: undefined });
    return { events, got: summary(got) };
  },

  // a stream that runs until cancelled; a second client subscribes to it, the
  // first cancels it, and both streams end with the task canceled
  async cancel() {
    const c = await client("gw-streamer");
    const watcher = await client("gw-streamer");
    const stream = c.sendMessageStream(request(message("forever")));
    const first = event((await stream.next()).value);
    const following = watcher.resubscribeTask({ tenant: "", id: first.id });
    const firstSeen = event((await following.next()).value);
    const canceled = await c.cancelTask({ tenant: "", id: first.id, metadata: undefined });
    const tail = [];
    for await (const e of stream) tail.push(event(e));
    const followed = [];
    for await (const e of following) followed.push(event(e));
    const again = await errorOf(() => c.cancelTask({ tenant: "", id: first.id, metadata: undefined }));
    const late = [];
    const lateError = await errorOf(async () => {
      for await (const e of watcher.resubscribeTask({ tenant: "", id: first.id })) late.push(event(e));
    });
    return { first, firstSeen, canceled: summary(canceled), tail, followed, again, late, lateError };
  },

  // a task that asks for input, answered in a second message on the same task
  async turns() {
    const c = await client("gw-echo");
    const first = await c.sendMessage(request(message("ask me")));
    const task = first.payload?.$case === "task" ? first.payload.value : first;
    const answer = message(arg ?? "grace", { taskId: task.id, contextId: task.contextId });
    const second = await c.sendMessage(request(answer));
    const done = second.payload?.$case === "task" ? second.payload.value : second;
    return { first: summary(task), done: summary(done) };
  },
};

// push notifications: a send that carries a config (arg: the webhook URL), then the
// config methods on its task: create with Bearer credentials, list, get, delete
scenarios.push = async () => {
  const c = await client("gw-echo");
  const sent = await c.sendMessage({
    ...request(message("push me")),
    configuration: {
      acceptedOutputModes: [],
      taskPushNotificationConfig: {
        tenant: "",
        id: "",
        taskId: "",
        url: arg,
        token: "js-token",
        authentication: undefined,
      },
      returnImmediately: false,
    },
  });
  const task = sent.payload?.$case === "task" ? sent.payload.value : sent;
  const made = await c.createTaskPushNotificationConfig({
    tenant: "",
    id: "js-config",
    taskId: task.id,
    url: arg,
    token: "",
    authentication: { scheme: "Bearer", credentials: "js-secret" },
  });
  const listed = await c.listTaskPushNotificationConfig({
    tenant: "",
    taskId: task.id,
    pageSize: 0,
    pageToken: "",
  });
  const got = await c.getTaskPushNotificationConfig({ tenant: "", taskId: task.id, id: made.id });
  await c.deleteTaskPushNotificationConfig({ tenant: "", taskId: task.id, id: made.id });
  const after = await c.listTaskPushNotificationConfig({
    tenant: "",
    taskId: task.id,
    pageSize: 0,
    pageToken: "",
  });
  return {
    task: summary(task),
    made: { id: made.id, taskId: made.taskId, url: made.url, auth: made.authentication },
    listed: listed.configs.map((x) => x.id),
    got: { id: got.id, url: got.url },
    after: after.configs.map((x) => x.id),
  };
};

// a secured gateway (arg: "client:secret"): the first call is refused with 401,
// whose WWW-Authenticate leads to the resource's metadata, then its authorization
// server and the client-credentials grant; the one token then serves two agents
scenarios.oauth = async () => {
  const [clientId, clientSecret] = arg.split(":");
  const provider = new ClientCredentialsProvider({ clientId, clientSecret, expectedIssuer: base });
  const seen = { refused: 0, tokensFetched: 0 };
  const bearer = async () => {
    const tokens = await provider.tokens();
    return tokens ? { Authorization: `Bearer ${tokens.access_token}` } : {};
  };
  const authenticating = createAuthenticatingFetchWithRetry(fetch, {
    headers: bearer,
    async shouldRetryWithHeaders(_req, res) {
      if (res.status !== 401) return undefined;
      seen.refused += 1;
      const { resourceMetadataUrl } = extractWWWAuthenticateParams(res);
      await auth(provider, { serverUrl: base, resourceMetadataUrl });
      seen.tokensFetched += 1;
      return bearer();
    },
  });
  const secured = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [
        new JsonRpcTransportFactory({ fetchImpl: authenticating }),
        new RestTransportFactory({ fetchImpl: authenticating }),
      ],
      preferredTransports: [transport],
    }),
  );
  const answers = {};
  for (const [agent, text] of [["gw-echo", "hello"], ["gw-streamer", "a b"]]) {
    const c = await secured.createFromUrl(`${base}/a2a/${agent}/`);
    const sent = await c.sendMessage(request(message(text)));
    const task = sent.payload?.$case === "task" ? sent.payload.value : sent;
    answers[agent] = summary(task);
  }
  const scope = (await provider.tokens())?.scope ?? "";
  return { ...seen, scope, answers };
};

const run = scenarios[scenario];
if (!run) {
  console.error(`unknown scenario ${scenario}; one of ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
const timer = setTimeout(() => {
  console.error(`scenario ${scenario} did not finish within 30 s`);
  process.exit(3);
}, 30_000);
try {
  console.log(JSON.stringify(await run()));
} catch (e) {
  console.error(e?.stack ?? String(e));
  process.exitCode = 1;
} finally {
  clearTimeout(timer);
}
