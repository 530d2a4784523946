// duplexkit playground: the AudioWorklet processors, served from the same origin as the page.
//
// "duplexkit-capture" resamples the microphone to the session's input rate and posts one 16-bit chunk per
// `chunkMs` of *input samples*: the media clock is the sample count, never the wall clock.
// "duplexkit-playback" resamples reply audio to the context rate, plays it in arrival order, and reports how
// many frames of each response it has rendered, which is what the page acknowledges as played.
"use strict";

const PHASES = 256; // kernel table resolution per input sample

// A streaming windowed-sinc resampler (Blackman window). Its low-pass sits just under the lower Nyquist
// frequency, so downsampling does not alias; it delays the signal by `half` input samples.
class Resampler {
  constructor(inRate, outRate, zeroCrossings = 16) {
    this.step = inRate / outRate;
    const scale = Math.min(1, outRate / inRate);
    this.cutoff = 0.94 * scale;
    this.half = Math.ceil(zeroCrossings / scale);
    this.table = new Float32Array(2 * this.half * PHASES + 1);
    for (let i = 0; i < this.table.length; i += 1) {
      const x = i / PHASES - this.half;
      const w = 0.42 + 0.5 * Math.cos((Math.PI * x) / this.half) + 0.08 * Math.cos((2 * Math.PI * x) / this.half);
      const arg = Math.PI * this.cutoff * x;
      this.table[i] = this.cutoff * (x === 0 ? 1 : Math.sin(arg) / arg) * w;
    }
    this.buffer = new Float32Array(this.half);
    this.length = this.half;
    this.position = this.half;
  }

  // The output samples that `input` completes (a Float32Array, possibly empty).
  push(input) {
    if (this.length + input.length > this.buffer.length) {
      const grown = new Float32Array(Math.max(2 * this.buffer.length, this.length + input.length));
      grown.set(this.buffer.subarray(0, this.length));
      this.buffer = grown;
    }
    this.buffer.set(input, this.length);
    this.length += input.length;
    const count = Math.max(0, Math.ceil((this.length - this.half - this.position) / this.step));
    const out = new Float32Array(count);
    const { buffer, table, half } = this;
    let t = this.position;
    for (let n = 0; n < count; n += 1) {
      const centre = Math.floor(t);
      let sum = 0;
      for (let k = centre - half + 1; k <= centre + half; k += 1) {
        sum += buffer[k] * table[Math.round((t - k + half) * PHASES)];
      }
      out[n] = sum;
      t += this.step;
    }
    const drop = Math.max(0, Math.floor(t) - half);
    buffer.copyWithin(0, drop, this.length);
    this.length -= drop;
    this.position = t - drop;
    return out;
  }

  // The tail still held back by the filter's delay.
  flush() {
    return this.push(new Float32Array(2 * this.half));
  }
}

class CaptureProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { targetRate, chunkMs } = options.processorOptions;
    this.resampler = new Resampler(sampleRate, targetRate);
    this.chunk = new Float32Array(Math.round((targetRate * chunkMs) / 1000));
    this.filled = 0;
    this.running = true;
    this.port.onmessage = (event) => {
      if (event.data.type === "stop") this.running = false;
    };
  }

  process(inputs, outputs) {
    for (const channel of outputs[0]) channel.fill(0);
    const input = inputs[0] && inputs[0][0];
    if (!this.running) return false;
    if (!input) return true;
    const samples = this.resampler.push(input);
    let offset = 0;
    while (offset < samples.length) {
      const take = Math.min(samples.length - offset, this.chunk.length - this.filled);
      this.chunk.set(samples.subarray(offset, offset + take), this.filled);
      this.filled += take;
      offset += take;
      if (this.filled === this.chunk.length) this.emit();
    }
    return true;
  }

  emit() {
    const pcm = new Int16Array(this.chunk.length);
    let energy = 0;
    for (let i = 0; i < this.chunk.length; i += 1) {
      const s = Math.max(-1, Math.min(1, this.chunk[i]));
      energy += s * s;
      pcm[i] = s < 0 ? s * 32768 : s * 32767;
    }
    this.filled = 0;
    this.port.postMessage({ type: "chunk", pcm, rms: Math.sqrt(energy / pcm.length) }, [pcm.buffer]);
  }
}

class PlaybackProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = []; // {id, samples (context rate), offset}
    this.resamplers = new Map(); // response id -> Resampler for its source rate
    this.rendered = new Map(); // response id -> frames rendered
    this.received = 0; // source samples received, all responses
    this.peak = 0; // largest absolute sample rendered
    this.sinceReport = 0;
    this.port.onmessage = (event) => this.receive(event.data);
  }

  receive(message) {
    if (message.type === "audio") {
      let resampler = this.resamplers.get(message.id);
      if (!resampler) {
        resampler = new Resampler(message.rate, sampleRate);
        this.resamplers.set(message.id, resampler);
        this.rendered.set(message.id, 0);
      }
      this.received += message.samples.length;
      this.enqueue(message.id, resampler.push(message.samples));
    } else if (message.type === "end") {
      const resampler = this.resamplers.get(message.id);
      if (resampler) this.enqueue(message.id, resampler.flush(), true);
    } else if (message.type === "clear") {
      const ids = new Set(this.queue.map((entry) => entry.id));
      this.queue = [];
      for (const id of ids) this.resamplers.delete(id);
      this.port.postMessage({ type: "cleared", played: this.report(ids) });
    }
  }

  enqueue(id, samples, last = false) {
    this.queue.push({ id, samples, offset: 0, last });
  }

  report(ids) {
    const played = {};
    for (const id of ids) played[id] = this.rendered.get(id) || 0;
    return played;
  }

  process(inputs, outputs) {
    const out = outputs[0][0];
    out.fill(0);
    let written = 0;
    const touched = new Set();
    while (written < out.length && this.queue.length) {
      const entry = this.queue[0];
      const take = Math.min(out.length - written, entry.samples.length - entry.offset);
      for (let i = 0; i < take; i += 1) {
        const s = entry.samples[entry.offset + i];
        out[written + i] = s;
        if (Math.abs(s) > this.peak) this.peak = Math.abs(s);
      }
      written += take;
      entry.offset += take;
      this.rendered.set(entry.id, (this.rendered.get(entry.id) || 0) + take);
      touched.add(entry.id);
      if (entry.offset === entry.samples.length) {
        this.queue.shift();
        if (entry.last) {
          this.resamplers.delete(entry.id);
          this.port.postMessage({
            type: "drained", id: entry.id, played: this.rendered.get(entry.id), received: this.received,
            peak: this.peak,
          });
        }
      }
    }
    for (let c = 1; c < outputs[0].length; c += 1) outputs[0][c].set(out);
    this.sinceReport += out.length;
    if (touched.size && this.sinceReport >= sampleRate / 10) {
      this.sinceReport = 0;
      this.port.postMessage({
        type: "progress",
        played: this.report(touched),
        received: this.received,
        peak: this.peak,
        queued: this.queue.reduce((n, e) => n + e.samples.length - e.offset, 0),
      });
    }
    return true;
  }
}

registerProcessor("duplexkit-capture", CaptureProcessor);
registerProcessor("duplexkit-playback", PlaybackProcessor);
