// voicecli's page: ask, hear the reply as it is written, see the word being heard, and
// stop it with Esc or the Stop button. Audio arrives as voicecli's AUDIO frames and plays
// through an AudioWorklet (worklet.js). Each turn's stages are timed on the page's clock
// (performance.now) for `voicecli bench --browser`: window.voicecli.ask() returns them.
"use strict";

const RATE = 24000;
const log = document.getElementById("log");
const speaking = document.getElementById("speaking");
const statusLine = document.getElementById("status");
const question = document.getElementById("question");

const state = {
  ws: null, ctx: null, node: null, ready: null,
  turn: null, // the turn being shown
  turns: new Map(), // turn -> its record (timings, sentences, result)
  waiting: [], // resolvers of ask(), in order
  asked: [], // records of questions sent, waiting for their turn number
  lastPlayed: "",
  syncs: new Map(), // turn -> what to do once the worklet's reports are all in
};

function connect() {
  const token = new URLSearchParams(location.search).get("token");
  const url = new URL("ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  if (token) url.searchParams.set("token", token);
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  state.ready = new Promise((resolve) => {
    ws.onopen = () => { statusLine.textContent = "ready"; resolve(); };
  });
  ws.onclose = (e) => { statusLine.textContent = `disconnected (${e.code}); reload to reconnect`; };
  ws.onmessage = (e) => (typeof e.data === "string" ? onMessage(JSON.parse(e.data)) : onAudio(e.data));
}

async function audio() {
  // Made on the first question: browsers start audio only after a user gesture.
  if (state.ctx === null) {
    state.ctx = new AudioContext({ sampleRate: RATE, latencyHint: "interactive" });
    await state.ctx.audioWorklet.addModule("worklet.js");
    state.node = new AudioWorkletNode(state.ctx, "voicecli-player", {
      outputChannelCount: [1], processorOptions: { capacity: RATE * 20 },
    });
    state.node.port.onmessage = (e) => fromWorklet(e.data);
    state.node.connect(state.ctx.destination);
  }
  if (state.ctx.state !== "running") await state.ctx.resume();
}

function send(message) {
  if (state.ws.readyState === WebSocket.OPEN) state.ws.send(JSON.stringify({ v: 1, ...message }));
}

// A turn's record: its stages on the page's clock (t), and per sentence its text, first
// audible time, first frame on the audio clock and length.
function newRecord() {
  return { t: {}, sentences: {}, audible: {}, frames: {}, samples: {}, underruns: 0 };
}

async function ask(text, options = {}) {
  await audio();
  await state.ready;
  const record = {
    ...newRecord(), question: text, buffered: !!options.buffered, t: { sent: performance.now() },
    output_latency: state.ctx.outputLatency, base_latency: state.ctx.baseLatency,
  };
  state.asked.push(record);
  send({ type: "ask", text, buffered: record.buffered });
  return new Promise((resolve) => state.waiting.push({ record, resolve }));
}

function interrupt() {
  // Silence here at once, and tell the server to stop everything upstream.
  if (state.node !== null && state.turn !== null) state.node.port.postMessage({ type: "flush", turn: state.turn });
  send({ type: "interrupt" });
}

function onMessage(msg) {
  const rec = state.turns.get(msg.turn);
  switch (msg.type) {
    case "hello":
      break;
    case "turn": {
      const record = state.asked.shift() || newRecord();
      record.turn = msg.turn;
      state.turns.set(msg.turn, record);
      state.turn = msg.turn;
      const user = document.createElement("p");
      user.className = "user";
      user.textContent = msg.question;
      record.reply = document.createElement("p");
      record.reply.className = "reply";
      log.append(user, record.reply);
      statusLine.textContent = "thinking";
      break;
    }
    case "text":
      if (!rec) break;
      rec.t.first_text ??= performance.now();
      rec.t.last_text = performance.now();
      rec.reply.textContent += msg.piece;
      log.scrollTop = log.scrollHeight;
      break;
    case "sentence":
      if (rec) rec.sentences[msg.sentence] = msg.display;
      break;
    case "now":
      if (rec) showNow(rec, msg);
      break;
    case "flush":
      if (state.node !== null) state.node.port.postMessage({ type: "flush", turn: msg.turn });
      if (rec) rec.t.flush_received ??= performance.now();
      break;
    case "audio_end":
      if (state.node !== null) state.node.port.postMessage({ type: "end", turn: msg.turn, samples: msg.samples });
      break;
    case "turn_end":
      if (!rec) break;
      rec.t.end = performance.now();
      Object.assign(rec, { interrupted: msg.interrupted, heard: msg.heard, error: msg.error });
      if (msg.interrupted) rec.reply.classList.add("interrupted");
      if (msg.error) showError(msg.error);
      speaking.textContent = "";
      statusLine.textContent = msg.error ? "error" : "ready";
      finish(rec);
      break;
    case "error":
      showError(msg.message);
      break;
  }
}

function finish(rec) {
  // The worklet's reports travel on its own port, in order: once it answers a sync,
  // every report of this turn it sent before has been read.
  if (state.node === null) return settle(rec);
  state.syncs.set(rec.turn, () => settle(rec));
  state.node.port.postMessage({ type: "sync", turn: rec.turn });
}

function settle(rec) {
  const i = state.waiting.findIndex((w) => w.record === rec);
  if (i < 0) return;
  const [{ resolve }] = state.waiting.splice(i, 1);
  const { reply, ...plain } = rec;
  resolve(plain);
}

function showError(text) {
  const p = document.createElement("p");
  p.className = "error";
  p.textContent = text;
  log.append(p);
}

function showNow(rec, msg) {
  if (msg.state) statusLine.textContent = msg.state;
  const display = msg.sentence === null ? undefined : rec.sentences[msg.sentence];
  speaking.replaceChildren();
  if (display === undefined) return;
  if (msg.word === null) {
    speaking.textContent = display;
    return;
  }
  const [a, b] = msg.word;
  const mark = document.createElement("mark");
  mark.textContent = display.slice(a, b);
  speaking.append(display.slice(0, a), mark, display.slice(b));
}

function onAudio(buffer) {
  // VCLI, version, kind | id length, id ("turn:sentence") | u32 sequence | int16 LE PCM
  const view = new DataView(buffer);
  const n = view.getUint8(6);
  const id = new TextDecoder().decode(new Uint8Array(buffer, 7, n));
  const [turn, sentence] = id.split(":").map(Number);
  const start = 7 + n + 4;
  const pcm = new Int16Array(buffer.slice(start, start + 2 * Math.floor((buffer.byteLength - start) / 2)));
  const samples = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) samples[i] = pcm[i] / 32768;
  const rec = state.turns.get(turn);
  if (rec) {
    rec.t.first_frame ??= performance.now();
    rec.samples[sentence] = (rec.samples[sentence] || 0) + samples.length;
  }
  if (state.node === null) return;
  state.node.port.postMessage({ type: "audio", turn, sentence, samples }, [samples.buffer]);
  if (rec) rec.t.first_handed ??= performance.now();
}

function fromWorklet(msg) {
  const rec = state.turns.get(msg.turn);
  if (msg.type === "synced") {
    const done = state.syncs.get(msg.turn);
    state.syncs.delete(msg.turn);
    if (done) done();
  } else if (msg.type === "first") {
    // The frame's output time, on the page's clock: where the device is now
    // (getOutputTimestamp), plus the frame's distance from it.
    const ts = state.ctx.getOutputTimestamp();
    const at = ts.performanceTime + (msg.frame / RATE - ts.contextTime) * 1000;
    if (rec) {
      rec.audible[msg.sentence] = at;
      rec.frames[msg.sentence] = msg.frame; // on the audio clock, which has no jitter
      rec.t.first_audible ??= at;
    }
    send({ type: "audible", turn: msg.turn, sentence: msg.sentence, after: (at - performance.now()) / 1000 });
  } else if (msg.type === "played") {
    if (rec) {
      rec.underruns = msg.underruns;
      rec.flush_frame = msg.flushFrame;
      rec.last_sound = msg.lastSound;
    }
    const key = `${msg.turn}:${msg.position}:${msg.underruns}`;
    if (key !== state.lastPlayed) {
      state.lastPlayed = key;
      send({ type: "played", turn: msg.turn, position: msg.position, underruns: msg.underruns });
    }
  }
}

document.getElementById("ask").addEventListener("submit", (e) => {
  e.preventDefault();
  const text = question.value.trim();
  if (!text) return;
  question.value = "";
  ask(text);
});
document.getElementById("stop").addEventListener("click", interrupt);
document.addEventListener("keydown", (e) => { if (e.key === "Escape") interrupt(); });

window.voicecli = { ask, interrupt, send, state };
connect();
