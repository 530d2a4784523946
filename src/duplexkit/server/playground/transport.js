// duplexkit playground transport: a WebRTC call (POST /v1/realtime/calls, events on the "oai-events"
// data channel, the microphone on an audio track with the browser's echo cancellation, the reply played
// from the server's track) when the server offers it, else the WebSocket. Both come back with the
// surface the page uses of a WebSocket (readyState, send, close, onopen, onmessage, onclose) plus `kind`.
"use strict";
(() => {
  const CONNECT_MS = 10000; // a call whose channel does not open by then falls back to the WebSocket

  // Why a call was not made; `fallback`: the WebSocket may still work (no WebRTC here or on the server,
  // or the call could not connect), otherwise the server refused the session itself (key, capacity).
  class CallRefused extends Error {
    constructor(message, { fallback, status = null, error = null }) {
      super(message);
      this.fallback = fallback;
      this.status = status;
      this.error = error;
    }
  }

  function gathered(pc) {
    if (pc.iceGatheringState === "complete") return Promise.resolve();
    return new Promise((resolve) => {
      pc.addEventListener("icegatheringstatechange", () => {
        if (pc.iceGatheringState === "complete") resolve();
      });
    });
  }

  // The call's state for the page: how much reply audio reached this browser (from the receiver's stats).
  const webrtcStats = { audioEnergy: 0, samplesReceived: 0, packetsLost: 0, jitterBufferMs: null };

  async function openCall({ stream, key }) {
    if (typeof RTCPeerConnection === "undefined") {
      throw new CallRefused("this browser has no WebRTC", { fallback: true });
    }
    const pc = new RTCPeerConnection(); // host candidates only: no STUN or TURN server is asked
    const channel = pc.createDataChannel("oai-events");
    for (const track of stream.getAudioTracks()) pc.addTrack(track, stream);
    const speaker = new Audio();
    speaker.autoplay = true;
    pc.ontrack = (event) => {
      speaker.srcObject = event.streams[0] || new MediaStream([event.track]);
      speaker.play().catch(() => {});
      const ctx = meterContext();
      meter.speaker = analyser(ctx, ctx.createMediaStreamSource(speaker.srcObject));
    };
    const fail = (error) => {
      pc.close();
      throw error;
    };
    await pc.setLocalDescription(await pc.createOffer());
    await gathered(pc); // the server does not trickle: the offer carries every candidate
    const headers = { "Content-Type": "application/sdp" };
    if (key) headers.Authorization = `Bearer ${key}`;
    let response;
    try {
      response = await fetch("/v1/realtime/calls", { method: "POST", body: pc.localDescription.sdp, headers });
    } catch (error) {
      return fail(new CallRefused(`the calls endpoint could not be reached: ${error.message}`, { fallback: true }));
    }
    if (response.status !== 201) {
      let error = null;
      try {
        error = (await response.json()).error || null;
      } catch {
        error = null;
      }
      const refused = response.status === 401 || response.status === 429;
      return fail(new CallRefused(`the call was refused (HTTP ${response.status})`, {
        fallback: !refused, status: response.status, error,
      }));
    }
    await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
    const opened = await Promise.race([
      new Promise((resolve) => channel.addEventListener("open", () => resolve(true))),
      new Promise((resolve) => setTimeout(() => resolve(false), CONNECT_MS)),
    ]);
    if (!opened) return fail(new CallRefused("the call did not connect", { fallback: true }));
    return wrap(pc, channel, speaker);
  }

  // The call with a WebSocket's surface: text messages on the channel; closing ends the call.
  function wrap(pc, channel, speaker) {
    const call = {
      kind: "webrtc", readyState: WebSocket.OPEN, onopen: null, onmessage: null, onclose: null,
      send(text) {
        if (channel.readyState === "open") channel.send(text);
      },
      close() {
        channel.close();
        pc.close();
        ended(1000);
      },
    };
    let closed = false;
    const ended = (code) => {
      if (closed) return;
      closed = true;
      call.readyState = WebSocket.CLOSED;
      clearInterval(poll);
      speaker.srcObject = null;
      if (call.onclose) call.onclose({ code, reason: "" });
    };
    channel.addEventListener("message", (event) => { if (call.onmessage) call.onmessage(event); });
    channel.addEventListener("close", () => ended(1000));
    pc.addEventListener("connectionstatechange", () => {
      if (pc.connectionState === "failed" || pc.connectionState === "closed") ended(1006);
    });
    const poll = setInterval(async () => {
      for (const report of (await pc.getStats()).values()) {
        if (report.type === "inbound-rtp" && report.kind === "audio") {
          webrtcStats.audioEnergy = report.totalAudioEnergy || 0;
          webrtcStats.samplesReceived = report.totalSamplesReceived || 0;
          webrtcStats.packetsLost = report.packetsLost || 0;
          if (report.jitterBufferEmittedCount) {
            webrtcStats.jitterBufferMs = (1000 * report.jitterBufferDelay) / report.jitterBufferEmittedCount;
          }
        }
      }
    }, 250);
    setTimeout(() => { if (call.onopen) call.onopen(); }, 0);
    return call;
  }

  // What a user waits: the end of their speech at the microphone to the first reply audio at the speaker,
  // on the page's clock (performance.now), whichever the transport. Levels are read every 10 ms from
  // analysers on the microphone stream and on what the page plays (the call's track, or the WebSocket
  // path's playback node): speech ends at the last loud microphone sample once 200 ms have stayed quiet;
  // the next reply audio to start on the speaker after it gives one value.
  const MIC_RMS = 0.02;
  const SPEAKER_RMS = 0.01;
  const QUIET_MS = 200;
  const heard = { speechEndToReplyMs: [] };
  const meter = { mic: null, speaker: null, speaking: false, lastLoudAt: null, pendingEnd: null, replying: false };
  const listeners = { micLoud: null, heard: [] };

  function analyser(ctx, source) {
    const node = ctx.createAnalyser();
    node.fftSize = 512;
    source.connect(node);
    return { node, buffer: new Float32Array(node.fftSize) };
  }

  function rms({ node, buffer }) {
    node.getFloatTimeDomainData(buffer);
    let sum = 0;
    for (const v of buffer) sum += v * v;
    return Math.sqrt(sum / buffer.length);
  }

  function measure() {
    const now = performance.now();
    if (meter.mic) {
      if (rms(meter.mic) >= MIC_RMS) {
        if (listeners.micLoud) listeners.micLoud(now);
        meter.speaking = true;
        meter.lastLoudAt = now;
        meter.pendingEnd = null;
      } else if (meter.speaking && now - meter.lastLoudAt >= QUIET_MS) {
        meter.speaking = false;
        meter.pendingEnd = meter.lastLoudAt;
      }
    }
    if (meter.speaker) {
      const loud = rms(meter.speaker) >= SPEAKER_RMS;
      if (loud && !meter.replying && meter.pendingEnd !== null) {
        heard.speechEndToReplyMs.push(now - meter.pendingEnd);
        meter.pendingEnd = null;
      }
      if (loud && listeners.heard.length) {
        const due = listeners.heard.filter((w) => w.since <= now);
        listeners.heard = listeners.heard.filter((w) => w.since > now);
        for (const w of due) w.callback(now);
      }
      meter.replying = loud;
    }
  }

  let meterCtx = null;
  function meterContext() {
    if (!meterCtx) {
      meterCtx = new AudioContext();
      meterCtx.resume().catch(() => {});
      setInterval(measure, 10);
    }
    return meterCtx;
  }

  function hearMicrophone(stream) {
    const ctx = meterContext();
    meter.mic = analyser(ctx, ctx.createMediaStreamSource(stream));
  }

  // The WebSocket path's speaker: the page's playback node (in the page's own audio context).
  function hearPlayback(ctx, node) {
    meterContext();
    meter.speaker = analyser(ctx, node);
  }

  // What the page observes of the call's audio, for the timeline: `onMicLoud(callback)` calls back with the
  // page time of every loud microphone reading (null to stop); `whenHeard(since, callback)` calls back once,
  // with the page time of the first loud reading of what the page plays at or after `since`.
  function onMicLoud(callback) {
    listeners.micLoud = callback;
  }

  function whenHeard(since, callback) {
    listeners.heard.push({ since, callback });
  }

  // The WebSocket, as the page opened it before calls existed.
  function openSocket(url, protocols) {
    const ws = new WebSocket(url, protocols);
    ws.kind = "websocket";
    return ws;
  }

  // A call when `webrtc` (the server offers it and the page did not ask for the WebSocket), else, or when
  // the call cannot be made, the WebSocket; a refusal of the session itself (key, capacity) is thrown.
  async function open({ webrtc, stream, key, url, protocols, onFallback }) {
    hearMicrophone(stream);
    if (webrtc) {
      try {
        return await openCall({ stream, key });
      } catch (error) {
        if (!(error instanceof CallRefused) || !error.fallback) throw error;
        if (onFallback) onFallback(error.message);
      }
    }
    return openSocket(url, protocols);
  }

  window.duplexkitTransport = { open, CallRefused, webrtcStats, heard, hearPlayback, onMicLoud, whenHeard };
})();
