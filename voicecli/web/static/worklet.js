// voicecli's player: a ring buffer the page fills with the reply's samples, played one
// render quantum at a time. It reports what it played (the turn's position, underruns)
// and the context frame at which each sentence's first sample was output; a flush drops
// everything queued before the next quantum is rendered.
class VoicecliPlayer extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.ring = new Float32Array(options.processorOptions.capacity);
    this.read = 0; // samples taken from the ring, ever
    this.write = 0; // samples put in it, ever
    this.turn = -1;
    this.played = 0; // samples of this turn output
    this.received = 0; // samples of this turn put in the ring
    this.markers = []; // [turn position, sentence], in order
    this.sentence = -1; // the sentence of the last samples received
    this.expecting = false; // audio is due: running dry now is an underrun
    this.end = null; // the turn's total samples, once the server says
    this.dry = false;
    this.underruns = 0;
    this.flushed = -1; // the turn flushed last: its late samples are dropped
    this.flushFrame = null; // the first frame rendered after the flush
    this.lastSound = null; // the last frame that carried a sample of the turn
    this.reportedAt = 0;
    this.port.onmessage = (e) => this.receive(e.data);
  }

  receive(msg) {
    if (msg.type === "audio") {
      if (msg.turn === this.flushed) return;
      if (msg.turn !== this.turn) this.begin(msg.turn);
      if (msg.sentence !== this.sentence) {
        this.sentence = msg.sentence;
        this.markers.push([this.received, msg.sentence]);
      }
      const samples = msg.samples;
      const room = this.ring.length - (this.write - this.read);
      const n = Math.min(samples.length, room); // the server keeps well under capacity
      for (let i = 0; i < n; i++) this.ring[(this.write + i) % this.ring.length] = samples[i];
      this.write += n;
      this.received += n;
      this.expecting = true;
    } else if (msg.type === "end") {
      if (msg.turn === this.turn) this.end = msg.samples;
    } else if (msg.type === "sync") {
      this.report(true);
      this.port.postMessage({ type: "synced", turn: msg.turn });
    } else if (msg.type === "flush") {
      // The first flush of the turn counts (the page's own Esc, then the server's).
      if ((msg.turn === this.turn || msg.turn === undefined) && this.flushed !== this.turn) {
        this.read = this.write;
        this.markers = [];
        this.expecting = false;
        this.flushed = this.turn;
        this.flushFrame = currentFrame;
        this.report(true);
      }
    }
  }

  begin(turn) {
    this.read = this.write;
    this.turn = turn;
    this.played = this.received = 0;
    this.markers = [];
    this.sentence = -1;
    this.expecting = false;
    this.end = null;
    this.dry = false;
    this.underruns = 0;
    this.flushFrame = this.lastSound = null;
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    let i = 0;
    while (i < out.length && this.read < this.write) {
      while (this.markers.length && this.markers[0][0] <= this.played) {
        const [, sentence] = this.markers.shift();
        this.port.postMessage({ type: "first", turn: this.turn, sentence, frame: currentFrame + i });
      }
      out[i] = this.ring[this.read % this.ring.length];
      this.lastSound = currentFrame + i;
      this.read++;
      this.played++;
      i++;
    }
    out.fill(0, i);
    if (i < out.length && this.expecting && (this.end === null || this.played < this.end)) {
      if (!this.dry) {
        this.dry = true;
        this.underruns++;
      }
    } else if (i > 0) {
      this.dry = false;
    }
    if (this.end !== null && this.played >= this.end) this.expecting = false;
    this.report(i > 0 && this.read === this.write);
    return true;
  }

  report(now) {
    if (this.turn < 0) return;
    if (!now && currentFrame - this.reportedAt < 960) return; // every 40 ms at 24 kHz
    this.reportedAt = currentFrame;
    this.port.postMessage({
      type: "played", turn: this.turn, position: this.played, underruns: this.underruns,
      flushFrame: this.flushFrame, lastSound: this.lastSound,
    });
  }
}

registerProcessor("voicecli-player", VoicecliPlayer);
