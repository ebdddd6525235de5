/**
 * An MRTR test server for mrtrweb's interop tests, written with the official TypeScript SDK
 * (`@modelcontextprotocol/server@2.4.0`), served over Streamable HTTP on loopback.
 *
 *     node build/server.mjs --port 0 --log /path/requests.jsonl
 *
 * prints `listening http://127.0.0.1:PORT/mcp` on stdout once it accepts connections.
 *
 * Only the 2026-07-28 ("modern") protocol is served (`legacy: 'reject'`): multi round-trip
 * requests exist only there, so a client that falls back to the 2025 handshake fails loudly.
 *
 * Tools (each answer is read with the SDK's `acceptedContent` / `inputResponse` helpers):
 *
 * - `form(subject)`: one form round (`inputRequired.elicit`) with a boolean, a bounded string,
 *   an email, a bounded integer with a default, a number with a default, a titled single-select
 *   with a default and a multi-select with a default; the result lists the accepted values.
 * - `defaults_form(item)`: one form round in which every field (of every type) has a default, so
 *   a scripted "accept with the defaults" completes it.
 * - `url(provider)`: one URL-mode round (`inputRequired.elicitUrl`).
 * - `state_only(ticket)`: one round carrying only `requestState` (no inputRequests); the client
 *   echoes it back unchanged and the result names the ticket the state carried. When the retry
 *   carries a progress token, two `notifications/progress` precede the result (so the SDK answers
 *   that request as an SSE stream instead of a JSON body).
 * - `multi_round(destination)`: two form rounds, each with its own `requestState`; the second
 *   state carries the first answer; every field has a default. The first `input_required` follows a progress notification
 *   (when the call carries a progress token), so it arrives on an SSE stream.
 * - `two_questions(topic)`: one round with two inputRequests, a form (a wire-shape schema with a
 *   titled `oneOf` single-select) and a URL-mode request.
 *
 * - `short_lived(what)`: one form round whose state expires after one second (its own codec,
 *   wire prefix `s.`): a late retry is refused by the SDK seam with -32602.
 *
 * - `slow(seconds)`: no round; progress every 200 ms until done or until its request is aborted
 *   (the HTTP client went away: recorded as `{"kind":"aborted"}`).
 * - `pattern_check()`: one form round whose fields carry ECMA-262 `pattern`s (a hand-written wire
 *   schema), re-checked by zod (V8 regexes) on the retry.
 * - `sampling(text)` and `roots()`: one round asking `sampling/createMessage` / `roots/list`
 *   (deprecated requests a client answers only where allowed), read back with `inputResponse`.
 *
 * Prompt `briefing(topic)` and resource template `ts://reports/{team}`: one form round each
 * (`prompts/get` and `resources/read` rounds).
 *
 * requestState: every state is minted with the SDK's `createRequestStateCodec` (HMAC-SHA256,
 * process-local key, 600 s TTL, bound to the JSON-RPC method) and verified by the SDK's
 * `ServerOptions.requestState.verify` seam before a handler runs: a tampered, expired or
 * re-bound state is answered with JSON-RPC -32602 "Invalid or expired requestState". On top of
 * that, this server (not the SDK: its codec has no replay protection) makes each state
 * single-use inside the same hook: every state carries a fresh nonce, and a second request
 * echoing an already consumed one (a replay, or a retry the client sent twice) gets the same
 * -32602. A state of another tool (same method binding) is refused by the tool (the SDK turns
 * that into a `tools/call` result with `isError: true`).
 *
 * Recording: every HTTP request (raw JSON body, headers of interest) and its response (status,
 * body) is appended as one JSON line to the `--log` file, and so is every state the tools mint
 * (`{"kind":"minted", ...}`), every state verified (`consumed`) or refused (`refused`), and every
 * request whose HTTP client went away before its response ended (`client-closed`), so the tests
 * can assert what reached the server and how often.
 */
import { appendFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';

import type { CallToolResult, InputRequiredResult, ServerContext } from '@modelcontextprotocol/server';
import {
    acceptedContent,
    createMcpHandler,
    createRequestStateCodec,
    inputRequired,
    inputResponse,
    McpServer,
    ProtocolError,
    ProtocolErrorCode,
    ResourceTemplate
} from '@modelcontextprotocol/server';
import * as z from 'zod';

const { values: opts } = parseArgs({
    options: {
        port: { type: 'string', default: '0' },
        log: { type: 'string' }
    }
});
const LOG_PATH = opts.log;

function record(entry: Record<string, unknown>): void {
    if (LOG_PATH !== undefined) {
        appendFileSync(LOG_PATH, JSON.stringify({ t: Date.now() / 1000, ...entry }) + '\n');
    }
}

// ---------------------------------------------------------------------------------------------
// requestState: the SDK's codec, plus this server's single-use nonces.

type State =
    | { tool: 'form'; nonce: string; subject: string }
    | { tool: 'url'; nonce: string; provider: string; elicitation: string }
    | { tool: 'state_only'; nonce: string; ticket: string; queuedAt: number }
    | { tool: 'multi_round'; nonce: string; step: 1; destination: string }
    | { tool: 'multi_round'; nonce: string; step: 2; destination: string; start: string; nights: number }
    | { tool: 'two_questions'; nonce: string; topic: string }
    | { tool: 'briefing'; nonce: string; topic: string }
    | { tool: 'team_report'; nonce: string; team: string }
    | { tool: 'short_lived'; nonce: string; what: string }
    | { tool: 'sampling'; nonce: string; text: string }
    | { tool: 'roots'; nonce: string }
    | { tool: 'pattern_check'; nonce: string }
    | { tool: 'defaults_form'; nonce: string; item: string };

const codec = createRequestStateCodec<State>({
    key: randomBytes(32),
    ttlSeconds: 600,
    bind: (ctx: ServerContext) => ctx.mcpReq.method
});

/** States of `short_lived` live one second (wire prefix `s.`): the person is always too slow. */
const SHORT_PREFIX = 's.';
const shortCodec = createRequestStateCodec<State>({
    key: randomBytes(32),
    ttlSeconds: 1,
    bind: (ctx: ServerContext) => ctx.mcpReq.method
});

const consumed = new Set<string>();

async function ask(tool: State['tool'], ctx: ServerContext, state: State, inputRequests?: InputRequiredResult['inputRequests']): Promise<InputRequiredResult> {
    const requestState = state.tool === 'short_lived' ? SHORT_PREFIX + (await shortCodec.mint(state, ctx)) : await codec.mint(state, ctx);
    record({ kind: 'minted', tool, nonce: state.nonce, requestState, payload: state, keys: Object.keys(inputRequests ?? {}) });
    return inputRequests === undefined ? inputRequired({ requestState }) : inputRequired({ inputRequests, requestState });
}

/**
 * `ServerOptions.requestState.verify`: the SDK codec's verification (MAC, expiry, binding), then
 * this server's single-use rule. Throwing here makes the SDK's seam answer -32602 "Invalid or
 * expired requestState" before any handler runs; the reason is recorded.
 */
async function verifyState(wire: string, ctx: ServerContext): Promise<State> {
    let state: State;
    try {
        state = wire.startsWith(SHORT_PREFIX) ? await shortCodec.verify(wire.slice(SHORT_PREFIX.length), ctx) : await codec.verify(wire, ctx);
    } catch (error) {
        record({ kind: 'refused', reason: error instanceof Error ? error.message : String(error), requestState: wire });
        throw error;
    }
    if (consumed.has(state.nonce)) {
        record({ kind: 'refused', reason: 'replay', nonce: state.nonce, requestState: wire });
        throw new Error('replay');
    }
    consumed.add(state.nonce);
    record({ kind: 'consumed', tool: state.tool, nonce: state.nonce, requestState: wire });
    return state;
}

/** The verified state of this retry (undefined on a first call); refuses another tool's state. */
function takeState<T extends State['tool']>(tool: T, ctx: ServerContext): Extract<State, { tool: T }> | undefined {
    const state = ctx.mcpReq.requestState<State>();
    if (state === undefined) {
        return undefined;
    }
    if (state.tool !== tool) {
        record({ kind: 'refused', reason: 'state of another tool', tool, nonce: state.nonce });
        throw new ProtocolError(ProtocolErrorCode.InvalidParams, 'requestState belongs to another tool');
    }
    return state as Extract<State, { tool: T }>;
}

function text(value: string): CallToolResult {
    return { content: [{ type: 'text', text: value }] };
}

function refusedText(what: string, key: string, ctx: ServerContext): CallToolResult | undefined {
    const view = inputResponse(ctx.mcpReq.inputResponses, key);
    if (view.kind === 'elicit' && view.action !== 'accept') {
        return text(`${what} ${view.action === 'decline' ? 'declined' : 'cancelled'}; nothing was done.`);
    }
    if (view.kind !== 'elicit') {
        return { isError: true, content: [{ type: 'text', text: `no answer for ${key} (${view.kind})` }] };
    }
    return undefined;
}

// ---------------------------------------------------------------------------------------------
// Schemas of the questions (the SDK turns the zod schemas into the wire requestedSchema).

const PROFILE = z.object({
    confirm: z.boolean().default(false).describe('Tick to confirm the order').meta({ title: 'Confirm' }),
    name: z.string().min(2).max(40).meta({ title: 'Full name', description: 'As on the invoice' }),
    email: z.email().meta({ title: 'Email', description: 'Where the receipt goes' }),
    quantity: z.int().min(1).max(10).default(2).meta({ title: 'Quantity' }),
    budget: z.number().min(0).max(1000).default(99.5).meta({ title: 'Budget (EUR)' }),
    color: z.enum(['red', 'green', 'blue']).default('green').meta({ title: 'Color' }),
    extras: z
        .array(z.enum(['gift-wrap', 'express', 'insurance']))
        .max(3)
        .default(['express'])
        .meta({ title: 'Extras' })
});

/** Every field defaulted: "accept with the defaults" answers it (a scripted consent policy can). */
const DEFAULTS = z.object({
    accept: z.boolean().default(true).meta({ title: 'Accept the terms' }),
    nickname: z.string().min(2).max(20).default('guest').meta({ title: 'Nickname' }),
    email: z.email().default('guest@example.test').meta({ title: 'Email' }),
    seats: z.int().min(1).max(9).default(1).meta({ title: 'Seats' }),
    tip: z.number().min(0).max(50).default(2.5).meta({ title: 'Tip (EUR)' }),
    size: z.enum(['s', 'm', 'l']).default('m').meta({ title: 'Size' }),
    toppings: z.array(z.enum(['cheese', 'olives', 'basil'])).default(['cheese', 'basil']).meta({ title: 'Toppings' })
});

const DATES = z.object({
    start: z.iso.date().default('2026-12-01').meta({ title: 'Start date' }),
    nights: z.int().min(1).max(30).default(3).meta({ title: 'Nights' })
});

const SEAT = z.object({
    seat: z.enum(['window', 'aisle', 'middle']).default('window').meta({ title: 'Seat' }),
    meal: z.boolean().default(true).meta({ title: 'Meal included' })
});

/** A wire-shape schema (passed through by the SDK as is): a titled single-select (`oneOf`). */
const CONTACT = {
    type: 'object' as const,
    properties: {
        priority: {
            type: 'string' as const,
            title: 'Priority',
            oneOf: [
                { const: 'p1', title: 'P1: page someone now' },
                { const: 'p2', title: 'P2: next business day' },
                { const: 'p3', title: 'P3: whenever' }
            ],
            default: 'p2'
        },
        note: { type: 'string' as const, title: 'Note', maxLength: 200 }
    },
    required: ['priority']
};

/**
 * ECMA-262 `pattern`s: the SDK's zod conversion refuses `pattern` (not in the MCP string schema),
 * so the wire schema is written by hand (the SDK passes wire schemas through) and the same
 * regexes are re-checked by zod (V8) on the retry.
 */
const CODE_PATTERN = /^\S{2,20}$/;
const LABEL_PATTERN = /^.{1,30}$/;
const CODE_WIRE = {
    type: 'object' as const,
    properties: {
        code: { type: 'string' as const, title: 'Code', description: 'No spaces', pattern: CODE_PATTERN.source },
        label: { type: 'string' as const, title: 'Label', pattern: LABEL_PATTERN.source }
    },
    required: ['code']
};
const CODE = z.object({ code: z.string().regex(CODE_PATTERN), label: z.string().regex(LABEL_PATTERN).optional() });

const AUDIENCE = z.object({
    audience: z.enum(['engineers', 'customers', 'executives']).meta({ title: 'Audience' })
});

const PERIOD = z.object({
    since: z.iso.date().meta({ title: 'Since' })
});

export const CONNECT_URL = 'https://auth.example.test/ts-connect';
export const VERIFY_URL = 'https://verify.example.test/ts-verify';

// ---------------------------------------------------------------------------------------------

function buildServer(): McpServer {
    const server = new McpServer(
        { name: 'mrtrweb-ts-mrtr-server', version: '1.0.0' },
        { capabilities: { tools: {} }, requestState: { verify: verifyState } }
    );

    server.registerTool(
        'form',
        {
            title: 'Order form (TypeScript SDK)',
            description: 'One form round with several field types and defaults.',
            inputSchema: z.object({ subject: z.string() })
        },
        async ({ subject }, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('form', ctx);
            if (state === undefined) {
                return ask('form', ctx, { tool: 'form', nonce: randomUUID(), subject }, {
                    profile: inputRequired.elicit({ message: `Order ${subject}: who orders, and what?`, requestedSchema: PROFILE })
                });
            }
            const refused = refusedText('Order', 'profile', ctx);
            if (refused !== undefined) {
                return refused;
            }
            const p = acceptedContent(ctx.mcpReq.inputResponses, 'profile', PROFILE);
            if (p === undefined) {
                return { isError: true, content: [{ type: 'text', text: 'the profile answer did not match the schema' }] };
            }
            return text(
                `Order of ${state.subject} for ${p.name} <${p.email}>: confirm=${p.confirm}, quantity=${p.quantity}, ` +
                    `budget=${p.budget}, color=${p.color}, extras=${p.extras.join('+') || 'none'}.`
            );
        }
    );

    server.registerTool(
        'defaults_form',
        {
            title: 'Order with defaults (TypeScript SDK)',
            description: 'One form round in which every field has a default.',
            inputSchema: z.object({ item: z.string() })
        },
        async ({ item }, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('defaults_form', ctx);
            if (state === undefined) {
                return ask('defaults_form', ctx, { tool: 'defaults_form', nonce: randomUUID(), item }, {
                    order: inputRequired.elicit({ message: `Order ${item}: check the details.`, requestedSchema: DEFAULTS })
                });
            }
            const refused = refusedText('Order', 'order', ctx);
            if (refused !== undefined) {
                return refused;
            }
            const o = acceptedContent(ctx.mcpReq.inputResponses, 'order', DEFAULTS);
            if (o === undefined) {
                return { isError: true, content: [{ type: 'text', text: 'the order answer did not match the schema' }] };
            }
            return text(
                `${state.item} for ${o.nickname} <${o.email}>: accept=${o.accept}, seats=${o.seats}, tip=${o.tip}, ` +
                    `size=${o.size}, toppings=${o.toppings.join('+') || 'none'}.`
            );
        }
    );

    server.registerTool(
        'url',
        {
            title: 'Connect an account (TypeScript SDK)',
            description: 'One URL-mode round.',
            inputSchema: z.object({ provider: z.string() })
        },
        async ({ provider }, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('url', ctx);
            if (state === undefined) {
                const elicitation = randomUUID();
                return ask('url', ctx, { tool: 'url', nonce: randomUUID(), provider, elicitation }, {
                    signin: inputRequired.elicitUrl({
                        message: `Sign in to ${provider} to connect your account.`,
                        url: `${CONNECT_URL}?provider=${encodeURIComponent(provider)}&e=${elicitation}`
                    })
                });
            }
            const refused = refusedText('Connection', 'signin', ctx);
            return refused ?? text(`Account at ${state.provider} connected (elicitation ${state.elicitation}).`);
        }
    );

    server.registerTool(
        'state_only',
        {
            title: 'Queued job (TypeScript SDK)',
            description: 'One round that carries only requestState: the client echoes it back.',
            inputSchema: z.object({ ticket: z.string() })
        },
        async ({ ticket }, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('state_only', ctx);
            if (state === undefined) {
                return ask('state_only', ctx, { tool: 'state_only', nonce: randomUUID(), ticket, queuedAt: Date.now() });
            }
            if (ctx.mcpReq.inputResponses !== undefined && Object.keys(ctx.mcpReq.inputResponses).length > 0) {
                return { isError: true, content: [{ type: 'text', text: 'unexpected inputResponses on a state-only retry' }] };
            }
            // Two progress notifications before the result: the SDK upgrades this response to SSE.
            const token = ctx.mcpReq._meta?.progressToken;
            if (token !== undefined) {
                for (const [progress, message] of [[1, 'collecting'], [2, 'rendering']] as const) {
                    await ctx.mcpReq.notify({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress, total: 2, message }
                    });
                }
            }
            return text(`Job ${state.ticket} done after a state-only round (state nonce ${state.nonce}).`);
        }
    );

    server.registerTool(
        'multi_round',
        {
            title: 'Book a trip (TypeScript SDK)',
            description: 'Two form rounds, each with its own requestState.',
            inputSchema: z.object({ destination: z.string() })
        },
        async ({ destination }, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('multi_round', ctx);
            if (state === undefined) {
                // A progress notification before the first input_required: that result arrives on SSE.
                const token = ctx.mcpReq._meta?.progressToken;
                if (token !== undefined) {
                    await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: 0, message: 'planning' } });
                }
                return ask('multi_round', ctx, { tool: 'multi_round', nonce: randomUUID(), step: 1, destination }, {
                    dates: inputRequired.elicit({ message: `When do you travel to ${destination}?`, requestedSchema: DATES })
                });
            }
            if (state.step === 1) {
                const refused = refusedText('Trip', 'dates', ctx);
                if (refused !== undefined) {
                    return refused;
                }
                const d = acceptedContent(ctx.mcpReq.inputResponses, 'dates', DATES);
                if (d === undefined) {
                    return { isError: true, content: [{ type: 'text', text: 'the dates answer did not match the schema' }] };
                }
                const next: State = { tool: 'multi_round', nonce: randomUUID(), step: 2, destination: state.destination, start: d.start, nights: d.nights };
                return ask('multi_round', ctx, next, {
                    seat: inputRequired.elicit({ message: `${d.nights} night(s) in ${state.destination} from ${d.start}: choose your seat.`, requestedSchema: SEAT })
                });
            }
            const refused = refusedText('Trip', 'seat', ctx);
            if (refused !== undefined) {
                return refused;
            }
            const s = acceptedContent(ctx.mcpReq.inputResponses, 'seat', SEAT);
            if (s === undefined) {
                return { isError: true, content: [{ type: 'text', text: 'the seat answer did not match the schema' }] };
            }
            return text(
                `Booked ${state.nights} night(s) in ${state.destination} from ${state.start}, ${s.seat} seat, meal ${s.meal ? 'included' : 'not included'}.`
            );
        }
    );

    server.registerTool(
        'two_questions',
        {
            title: 'Two questions in one round (TypeScript SDK)',
            description: 'One round with two inputRequests: a form (titled single-select) and a URL.',
            inputSchema: z.object({ topic: z.string() })
        },
        async ({ topic }, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('two_questions', ctx);
            if (state === undefined) {
                return ask('two_questions', ctx, { tool: 'two_questions', nonce: randomUUID(), topic }, {
                    contact: inputRequired.elicit({ message: `Incident ${topic}: how urgent is it?`, requestedSchema: CONTACT }),
                    verify: inputRequired.elicitUrl({ message: 'Verify your identity.', url: `${VERIFY_URL}?topic=${encodeURIComponent(topic)}` })
                });
            }
            const contact = inputResponse(ctx.mcpReq.inputResponses, 'contact');
            const verify = inputResponse(ctx.mcpReq.inputResponses, 'verify');
            if (contact.kind !== 'elicit' || verify.kind !== 'elicit') {
                return { isError: true, content: [{ type: 'text', text: `answers missing: contact ${contact.kind}, verify ${verify.kind}` }] };
            }
            const detail = contact.action === 'accept' ? `priority ${String(contact.content?.['priority'])}, note ${JSON.stringify(contact.content?.['note'] ?? null)}` : contact.action;
            return text(`Incident ${state.topic}: contact ${detail}; verify ${verify.action}.`);
        }
    );

    server.registerTool(
        'short_lived',
        {
            title: 'Short-lived question (TypeScript SDK)',
            description: 'One form round whose requestState expires after a second.',
            inputSchema: z.object({ what: z.string() })
        },
        async ({ what }, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('short_lived', ctx);
            if (state === undefined) {
                return ask('short_lived', ctx, { tool: 'short_lived', nonce: randomUUID(), what }, {
                    ok: inputRequired.elicit({ message: `Quick: ${what}?`, requestedSchema: { type: 'object', properties: { ok: { type: 'boolean', title: 'OK' } } } })
                });
            }
            return text(`${state.what}: answered in time.`);
        }
    );

    server.registerTool(
        'sampling',
        {
            title: 'Summarize through the client (TypeScript SDK)',
            description: 'One round asking sampling/createMessage (deprecated; allowed per server).',
            inputSchema: z.object({ text: z.string() })
        },
        async ({ text: input }, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('sampling', ctx);
            if (state === undefined) {
                return ask('sampling', ctx, { tool: 'sampling', nonce: randomUUID(), text: input }, {
                    summary: inputRequired.createMessage({
                        messages: [{ role: 'user', content: { type: 'text', text: `Summarize: ${input}` } }],
                        systemPrompt: 'Answer in one sentence.',
                        maxTokens: 120
                    })
                });
            }
            const view = inputResponse(ctx.mcpReq.inputResponses, 'summary');
            if (view.kind !== 'sampling') {
                const dropped = ctx.mcpReq.droppedInputResponseKeys ?? [];
                return { isError: true, content: [{ type: 'text', text: `summary answer read as ${view.kind} (dropped: ${dropped.join(',') || 'none'})` }] };
            }
            const content = view.result.content;
            const said = !Array.isArray(content) && content.type === 'text' ? content.text : JSON.stringify(content);
            return text(`Summary by ${view.result.model} (${view.result.stopReason ?? 'no stop reason'}): ${said}`);
        }
    );

    server.registerTool(
        'roots',
        {
            title: 'List my roots (TypeScript SDK)',
            description: 'One round asking roots/list (deprecated; allowed per server).',
            inputSchema: z.object({})
        },
        async (_args, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('roots', ctx);
            if (state === undefined) {
                return ask('roots', ctx, { tool: 'roots', nonce: randomUUID() }, { roots: inputRequired.listRoots() });
            }
            const view = inputResponse(ctx.mcpReq.inputResponses, 'roots');
            if (view.kind !== 'roots') {
                const dropped = ctx.mcpReq.droppedInputResponseKeys ?? [];
                return { isError: true, content: [{ type: 'text', text: `roots answer read as ${view.kind} (dropped: ${dropped.join(',') || 'none'})` }] };
            }
            return text(`Roots: ${view.roots.map(r => (r.name === undefined ? r.uri : `${r.uri} (${r.name})`)).join('; ')}`);
        }
    );

    server.registerTool(
        'slow',
        {
            title: 'Slow job (TypeScript SDK)',
            description: 'Works up to `seconds`, reporting progress every 200 ms; stops when the request is aborted.',
            inputSchema: z.object({ seconds: z.int().min(1).max(60) })
        },
        async ({ seconds }, ctx): Promise<CallToolResult> => {
            const token = ctx.mcpReq._meta?.progressToken;
            const steps = seconds * 5;
            for (let step = 1; step <= steps; step++) {
                await new Promise(resolve => setTimeout(resolve, 200));
                if (ctx.mcpReq.signal.aborted) {
                    record({ kind: 'aborted', tool: 'slow', id: ctx.mcpReq.id, step });
                    return text('aborted');
                }
                if (token !== undefined) {
                    await ctx.mcpReq.notify({ method: 'notifications/progress', params: { progressToken: token, progress: step, total: steps, message: `step ${step}` } });
                }
            }
            return text(`Worked ${seconds} s.`);
        }
    );

    server.registerTool(
        'pattern_check',
        {
            title: 'Pattern check (TypeScript SDK)',
            description: 'One form round whose fields carry ECMA-262 patterns the server re-checks.',
            inputSchema: z.object({})
        },
        async (_args, ctx): Promise<CallToolResult | InputRequiredResult> => {
            const state = takeState('pattern_check', ctx);
            if (state === undefined) {
                return ask('pattern_check', ctx, { tool: 'pattern_check', nonce: randomUUID() }, {
                    code: inputRequired.elicit({ message: 'Enter the code.', requestedSchema: CODE_WIRE })
                });
            }
            const c = acceptedContent(ctx.mcpReq.inputResponses, 'code', CODE);
            if (c === undefined) {
                return { isError: true, content: [{ type: 'text', text: `the code answer did not match the schema: ${JSON.stringify(ctx.mcpReq.inputResponses?.['code'] ?? null)}` }] };
            }
            return text(`Code ${c.code} accepted${c.label === undefined ? '' : ` (${c.label})`}.`);
        }
    );

    server.registerPrompt(
        'briefing',
        {
            title: 'Briefing (TypeScript SDK)',
            description: 'A prompt that asks who the audience is first.',
            argsSchema: z.object({ topic: z.string() })
        },
        async ({ topic }, ctx) => {
            const state = takeState('briefing', ctx);
            if (state === undefined) {
                return ask('briefing', ctx, { tool: 'briefing', nonce: randomUUID(), topic }, {
                    audience: inputRequired.elicit({ message: `Who is the briefing on ${topic} for?`, requestedSchema: AUDIENCE })
                });
            }
            const a = acceptedContent(ctx.mcpReq.inputResponses, 'audience', AUDIENCE);
            const who = a?.audience ?? 'a general audience';
            return { messages: [{ role: 'user', content: { type: 'text', text: `Brief ${who} on ${state.topic}.` } }] };
        }
    );

    server.registerResource(
        'team_report',
        new ResourceTemplate('ts://reports/{team}', { list: undefined }),
        { title: 'Team report (TypeScript SDK)', mimeType: 'text/plain' },
        async (uri, variables, ctx) => {
            const state = takeState('team_report', ctx);
            if (state === undefined) {
                const team = String(variables['team']);
                return ask('team_report', ctx, { tool: 'team_report', nonce: randomUUID(), team }, {
                    period: inputRequired.elicit({ message: `Report for team ${decodeURIComponent(team)}: since when?`, requestedSchema: PERIOD })
                });
            }
            const p = acceptedContent(ctx.mcpReq.inputResponses, 'period', PERIOD);
            const body = p === undefined ? `No report for ${decodeURIComponent(state.team)}.` : `Report for team ${decodeURIComponent(state.team)} since ${p.since}: 7 changes.`;
            return { contents: [{ uri: uri.href, mimeType: 'text/plain', text: body }] };
        }
    );

    return server;
}

// ---------------------------------------------------------------------------------------------
// HTTP: node:http in front of the SDK's web-standard handler, recording what goes in and out.

const handler = createMcpHandler(() => buildServer(), {
    legacy: 'reject',
    onerror: (error: Error) => record({ kind: 'sdk-error', message: error.message })
});

function parsed(body: string): unknown {
    try {
        return JSON.parse(body);
    } catch {
        return null;
    }
}

async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) {
        chunks.push(chunk as Buffer);
    }
    const body = Buffer.concat(chunks).toString('utf8');
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers)) {
        if (Array.isArray(value)) {
            value.forEach(v => headers.append(name, v));
        } else if (value !== undefined) {
            headers.set(name, value);
        }
    }
    const seq = randomUUID();
    record({
        kind: 'request',
        seq,
        httpMethod: req.method,
        path: req.url,
        protocolHeader: req.headers['mcp-protocol-version'] ?? null,
        body: body === '' ? null : parsed(body)
    });
    const abort = new AbortController();
    res.on('close', () => {
        if (!res.writableFinished) {
            record({ kind: 'client-closed', seq });
            abort.abort();
        }
    });
    const request = new Request(`http://${req.headers.host ?? '127.0.0.1'}${req.url ?? '/'}`, {
        method: req.method,
        headers,
        body: req.method === 'GET' || req.method === 'HEAD' ? undefined : body,
        signal: abort.signal
    });
    const response = await handler.fetch(request);
    res.writeHead(response.status, Object.fromEntries(response.headers.entries()));
    let out = '';
    if (response.body !== null) {
        const decoder = new TextDecoder();
        try {
            for await (const chunk of response.body) {
                out += decoder.decode(chunk, { stream: true });
                res.write(chunk);
            }
        } catch (error) {
            if (!abort.signal.aborted) {
                throw error;
            }
        }
    }
    res.end();
    const contentType = response.headers.get('content-type') ?? '';
    record({ kind: 'response', seq, status: response.status, contentType, body: contentType.includes('json') ? parsed(out) : out });
}

const http = createServer((req, res) => {
    serve(req, res).catch((error: unknown) => {
        record({ kind: 'http-error', message: String(error) });
        if (!res.headersSent) {
            res.writeHead(500);
        }
        res.end();
    });
});

http.listen(Number(opts.port), '127.0.0.1', () => {
    const address = http.address();
    const port = typeof address === 'object' && address !== null ? address.port : Number(opts.port);
    process.stdout.write(`listening http://127.0.0.1:${port}/mcp\n`);
});

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.on(signal, () => {
        http.close();
        void handler.close();
        process.exit(0);
    });
}
