// duplexkit playground: the connection. Microphone -> 200 ms appends on the media clock; reply audio ->
// playback with honest acks; server events -> the view (view.js: the timeline and the transcript).
// `send` and the `handle(conn, event)` switch are the two ends of the transport (transport.js): the
// WebSocket, or a WebRTC call, whose audio rides its tracks, so the view is fed from what the page
// observes of them instead (the microphone's and the speaker's levels, the channel's unit-stamped events).
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const root = document.documentElement;
  // The longest append: the page sends one unit of the server's (`chunk_period_ms`), at most this, so the
  // end of speech reaches the model with the unit that holds it (issue #47: 200 ms appends held it up to a
  // unit longer on a 100 ms grid).
  const MAX_APPEND_MS = 200;
  const SPEECH_RMS = 0.015; // a chunk louder than this counts as speech (the page's voice-activity hint)
  const ACK_EVERY_MS = 250;
  const MIC_READING_MS = 10; // the transport reads the microphone's level this often
  const CALL_MARK_MS = 120; // a function call's width on the model lane (a call is an instant)
  let toolResults = {}; // the Tools field: name -> the fixed result a call of it is answered with
  const KEY_STORE = "duplexkit.playground.api-key";
  const authRequired = root.dataset.auth === "required";
  // Error codes that report a race duplex makes expected (the server's BENIGN_CODES): counted, never an alert.
  const BENIGN_CODES = new Set((root.dataset.benign || "").split(" ").filter(Boolean));

  // What the page observed; read by people through the stats panel, and by the browser test.
  const stats = {
    appends: 0, sentMs: 0, speechChunks: 0, receivedMs: 0, workletReceived: 0, workletPeak: 0,
    playedMs: 0, acksSent: 0, acksAcknowledged: 0, acknowledgedMs: {}, truncatedAtMs: {}, benign: {}, errors: [], units: { listen: 0, speak: 0 },
    closed: null, transport: null, fallback: null, webrtc: window.duplexkitTransport.webrtcStats,
    heard: window.duplexkitTransport.heard,
  };
  window.duplexkitPlayground = { stats };

  let live = null; // the current connection's state, or null
  const timeline = new PlaygroundView.Timeline($("timeline"));
  const transcript = new PlaygroundView.Transcript($("transcript"), $("transcript-empty"));
  window.duplexkitPlayground.timeline = timeline;

  $("model-name").textContent = root.dataset.model || "the model";
  if (authRequired) {
    $("auth-fields").hidden = false;
    const saved = localStorage.getItem(KEY_STORE);
    if (saved) {
      $("api-key").value = saved;
      $("remember").checked = true;
    }
  }

  function setStatus(state, text) {
    const status = $("status");
    status.dataset.state = state;
    status.textContent = text;
  }

  // A failure the user must see: its kind (data-kind, for tests and styling), a message and, when the
  // failure is retryable, a Retry button.
  function fail(kind, text, retry = false) {
    const alert = $("alert");
    alert.dataset.kind = kind;
    $("alert-text").textContent = text;
    $("retry").hidden = !retry;
    alert.hidden = false;
  }

  function clearAlert() {
    $("alert").hidden = true;
    delete $("alert").dataset.kind;
  }

  function seconds(ms) {
    return `${(ms / 1000).toFixed(1)} s`;
  }

  function renderStats() {
    if (stats.transport === "webrtc") { // the audio rides the call's tracks: what the page and the server saw of them
      $("stat-sent").textContent = `${seconds(stats.sentMs)} on the call's track (as far as the server's units reached)`;
      $("stat-received").textContent = `${seconds(stats.receivedMs)} on the server's track ` +
        `(${stats.webrtc.samplesReceived} samples reached the browser)`;
      $("stat-played").textContent = `${seconds(stats.playedMs)} (what the server sent, counted as played)`;
      $("stat-acks").textContent = `${stats.acksAcknowledged} made by the server for its track`;
      return;
    }
    $("stat-sent").textContent = `${seconds(stats.sentMs)} in ${stats.appends} appends (${stats.speechChunks} with speech)`;
    $("stat-received").textContent = `${seconds(stats.receivedMs)} (${stats.workletReceived} samples reached the player)`;
    $("stat-played").textContent = seconds(stats.playedMs);
    $("stat-acks").textContent = `${stats.acksSent} sent, ${stats.acksAcknowledged} acknowledged` +
      (stats.benign.playback_ack_too_late ? `, ${stats.benign.playback_ack_too_late} too late (benign)` : "");
  }

  // A settings field holding a JSON object ("{}" when empty); SettingsError names the field.
  function jsonObject(field, what) {
    const raw = $(field).value.trim();
    if (!raw) return {};
    let value;
    try {
      value = JSON.parse(raw);
    } catch (error) {
      throw new SettingsError(`${what} is not JSON: ${error.message}`, field);
    }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      throw new SettingsError(`${what} must be a JSON object`, field);
    }
    return value;
  }

  function settings() {
    const extra = jsonObject("extra-body", "extra_body");
    const tools = jsonObject("tools", "Tools");
    const session = {
      modalities: ["audio", "text"],
      input_audio_format: "pcm16",
      output_audio_format: "pcm16",
      playback_commit_policy: "ack_only", // history keeps what this page reports played, nothing more
      overlap_policy: $("overlap").value,
      turn_detection: $("turn-detection").value === "server_vad" ? { type: "server_vad" } : null,
      extra_body: extra,
    };
    if ($("instructions").value.trim()) session.instructions = $("instructions").value;
    if ($("voice").value.trim()) session.voice = $("voice").value.trim();
    if (Object.keys(tools).length) {
      session.tools = Object.keys(tools).map((name) => ({
        type: "function", name, description: `${name} (the playground answers it with a fixed result)`,
        parameters: { type: "object", properties: {} },
      }));
    }
    toolResults = tools;
    return session;
  }

  class SettingsError extends Error {
    constructor(message, field) {
      super(message);
      this.field = field;
    }
  }

  function checkSettings() {
    for (const field of ["extra-body", "tools"]) {
      $(`${field}-error`).hidden = true;
      $(field).removeAttribute("aria-invalid");
    }
    try {
      return settings();
    } catch (error) {
      if (!(error instanceof SettingsError)) throw error;
      $(`${error.field}-error`).textContent = error.message;
      $(`${error.field}-error`).hidden = false;
      $(error.field).setAttribute("aria-invalid", "true");
      $(error.field).focus();
      return null;
    }
  }

  function socketUrl() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return `${scheme}//${location.host}/v1/realtime?autostart=0`;
  }

  async function openMicrophone() {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new MicError("insecure", "This page can reach the microphone only over https or on localhost.");
    }
    try {
      return await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
    } catch (error) {
      if (error.name === "NotAllowedError" || error.name === "SecurityError") {
        throw new MicError("mic-refused", "Microphone access was refused. Allow it for this site, then connect again.");
      }
      if (error.name === "NotFoundError" || error.name === "OverconstrainedError") {
        throw new MicError("mic-missing", "No microphone was found.");
      }
      throw new MicError("mic-failed", `The microphone could not be opened: ${error.name}: ${error.message}`);
    }
  }

  class MicError extends Error {
    constructor(kind, message) {
      super(message);
      this.kind = kind;
    }
  }

  async function connect() {
    clearAlert();
    const session = checkSettings();
    if (!session) return;
    const key = $("api-key").value.trim();
    if (authRequired && !key) {
      fail("auth-required", "This server needs an API key: enter it above, then connect.");
      $("api-key").focus();
      return;
    }
    if (authRequired && $("remember").checked) localStorage.setItem(KEY_STORE, key);
    else localStorage.removeItem(KEY_STORE);

    setStatus("connecting", "Opening the microphone…");
    $("connect").disabled = true;
    const ctx = new AudioContext({ latencyHint: "interactive" });
    let stream;
    try {
      await ctx.resume();
      await ctx.audioWorklet.addModule("/playground/worklet.js");
      stream = await openMicrophone();
    } catch (error) {
      await ctx.close();
      $("connect").disabled = false;
      setStatus("idle", "Not connected.");
      if (error instanceof MicError) fail(error.kind, error.message);
      else fail("audio-failed", `Audio could not start: ${error.message}`);
      return;
    }
    setStatus("connecting", "Connecting to the server…");
    const protocols = ["realtime"];
    if (key) protocols.push(`openai-insecure-api-key.${key}`);
    let ws;
    try {
      ws = await window.duplexkitTransport.open({
        webrtc: wantsCall(), stream, key, url: socketUrl(), protocols,
        onFallback: (why) => { stats.fallback = why; },
      });
    } catch (error) {
      for (const track of stream.getTracks()) track.stop();
      await ctx.close();
      $("connect").disabled = false;
      setStatus("idle", "Not connected.");
      if (error instanceof window.duplexkitTransport.CallRefused) callRefused(error);
      else fail("auth-refused", `This key cannot be sent by a browser (${error.name}): check it for spaces or commas.`);
      return;
    }
    stats.transport = ws.kind;
    $("status").dataset.transport = ws.kind;
    $("stat-transport").textContent = ws.kind === "webrtc" ? "WebRTC (echo cancellation on)" :
      `WebSocket${stats.fallback ? ` (WebRTC fell back: ${stats.fallback})` : ""}`;
    live = {
      ws, ctx, stream, capture: null, playback: null, session: null, opened: false, closedReason: null,
      responses: new Map(), heard: new Map(), sendChain: Promise.resolve(), refused: null,
      items: [], // conversation item ids in the server's order (each after its `previous_item_id`)
      mediaOffsetMs: null, // page clock - input media clock: where on the page's clock the microphone started
      micLoudAt: [], // over WebRTC: loud microphone readings (page clock) not on the timeline yet
      calls: new Map(), // function calls the model made, by call_id
      callNames: new Map(), // function_call item id -> its name (beta's arguments.done carries none)
      callResponses: new Set(), // responses with calls answered, to continue once they are done
    };
    timeline.reset();
    transcript.reset();
    const conn = live;
    if (ws.kind === "webrtc") window.duplexkitTransport.onMicLoud((at) => micLoud(conn, at));
    ws.onopen = () => {
      conn.opened = true;
      send(conn, { type: "session.update", session });
    };
    ws.onmessage = (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch {
        fail("protocol", "The server sent a frame that is not JSON.");
        return;
      }
      handle(conn, event);
    };
    ws.onclose = (close) => closed(conn, close);
  }

  // WebRTC when the server offers it, unless the page was opened with ?transport=websocket.
  function wantsCall() {
    return root.dataset.webrtc === "available" &&
      new URLSearchParams(location.search).get("transport") !== "websocket";
  }

  function callRefused(error) {
    const detail = error.error ? `: ${error.error.message}` : "";
    if (error.status === 429) fail("capacity", `The server is full${detail}. This is temporary: retry in a moment.`, true);
    else fail("auth-refused", `The server refused the call${detail}.`);
  }

  function send(conn, event) {
    if (conn.ws.readyState === WebSocket.OPEN) conn.ws.send(JSON.stringify(event));
  }

  // Appends and the acks that must precede them leave in order, through one promise chain.
  function queue(conn, job) {
    conn.sendChain = conn.sendChain.then(job).catch((error) => fail("page", `Page error: ${error.message}`));
  }

  async function startAudio(conn) {
    const caps = conn.session.capabilities || {};
    if (conn.ws.kind === "webrtc") { // the microphone rides the call's track; the reply plays from the server's
      $("interrupt").disabled = false;
      setStatus("live", `Live over WebRTC: speak to ${root.dataset.model || "the model"}. ` +
        `Units of ${caps.chunk_period_ms || "?"} ms.`);
      return;
    }
    const inputRate = caps.input_sample_rate_hz || 16000;
    const appendMs = Math.min(MAX_APPEND_MS, caps.chunk_period_ms || MAX_APPEND_MS);
    const source = conn.ctx.createMediaStreamSource(conn.stream);
    conn.capture = new AudioWorkletNode(conn.ctx, "duplexkit-capture", {
      numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1],
      processorOptions: { targetRate: inputRate, chunkMs: appendMs },
    });
    conn.playback = new AudioWorkletNode(conn.ctx, "duplexkit-playback", {
      numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [1],
    });
    conn.inputRate = inputRate;
    conn.sentSamples = 0;
    conn.capture.port.onmessage = (message) => captured(conn, message.data);
    conn.playback.port.onmessage = (message) => playbackReport(conn, message.data);
    source.connect(conn.capture);
    conn.capture.connect(conn.ctx.destination); // silent output: keeps the capture node pulled
    conn.playback.connect(conn.ctx.destination);
    window.duplexkitTransport.hearPlayback(conn.ctx, conn.playback);
    $("interrupt").disabled = false;
    setStatus("live", `Live over WebSocket: speak to ${root.dataset.model || "the model"}. Input ${inputRate} Hz, ` +
      `units of ${caps.chunk_period_ms || "?"} ms.`);
  }

  function base64Of(bytes) {
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return btoa(binary);
  }

  function captured(conn, chunk) {
    if (chunk.type !== "chunk") return;
    const speech = chunk.rms >= SPEECH_RMS;
    const arrivedAt = performance.now();
    queue(conn, async () => {
      if (speech && conn.session.overlap_policy === "barge_in_on_speech") await truncate(conn);
      conn.sentSamples += chunk.pcm.length;
      const durationMs = (1000 * chunk.pcm.length) / conn.inputRate;
      const endMs = (1000 * conn.sentSamples) / conn.inputRate;
      send(conn, {
        type: "input_audio_buffer.append",
        audio: base64Of(new Uint8Array(chunk.pcm.buffer)),
        sample_rate_hz: conn.inputRate,
        duration_ms: durationMs,
        audio_end_ms: endMs,
        is_speech: speech,
      });
      // The chunk that arrived soonest after its audio ended places the media clock on the page's clock.
      conn.mediaOffsetMs = Math.min(conn.mediaOffsetMs ?? Infinity, arrivedAt - endMs);
      stats.appends += 1;
      stats.sentMs = endMs;
      if (speech) {
        stats.speechChunks += 1;
        timeline.span("you", "speech", endMs - durationMs, endMs, { title: "you spoke (the page heard speech)" });
      } else {
        timeline.extend(endMs);
      }
      renderStats();
    });
  }

  // The responses whose audio is still queued or playing.
  function audible(conn) {
    return [...conn.responses.values()].filter((r) => r.receivedMs > 0 && !r.cut && !r.drained);
  }

  // Stop playback now and report exactly what was played, before the speech that interrupts it is sent.
  // Everything the worklet rendered is heard (it is already in the output device's buffer).
  async function truncate(conn) {
    const cut = audible(conn);
    if (!cut.length) return;
    for (const r of cut) r.cut = true;
    const played = await new Promise((resolve) => {
      conn.onCleared = resolve;
      conn.playback.port.postMessage({ type: "clear" });
    });
    for (const r of cut) {
      r.playedMs = Math.min(r.receivedMs, (1000 * (played[r.id] || 0)) / conn.ctx.sampleRate);
      stats.truncatedAtMs[r.id] = r.playedMs;
      ack(conn, r, true);
      heardUpTo(conn, r, r.playedMs);
    }
  }

  function outputLatencyMs(ctx) {
    return 1000 * ((ctx.baseLatency || 0) + (ctx.outputLatency || 0));
  }

  function playbackReport(conn, report) {
    if (report.type === "cleared") {
      if (conn.onCleared) conn.onCleared(report.played);
      conn.onCleared = null;
      return;
    }
    if (report.type === "progress") {
      stats.workletReceived = report.received;
      stats.workletPeak = report.peak;
      const now = performance.now();
      for (const [id, frames] of Object.entries(report.played)) {
        const r = conn.responses.get(id);
        if (!r || r.cut) continue;
        const renderedMs = (1000 * frames) / conn.ctx.sampleRate;
        // Rendered audio still in the output device's buffer has not been heard yet.
        if (r.heardAt === null && frames > 0) r.heardAt = now - renderedMs + outputLatencyMs(conn.ctx);
        r.playedMs = Math.min(r.receivedMs, Math.max(0, renderedMs - outputLatencyMs(conn.ctx)));
        if (now - r.lastAckAt >= ACK_EVERY_MS) ack(conn, r, false);
        heardUpTo(conn, r, renderedMs);
      }
    } else if (report.type === "drained") {
      stats.workletReceived = report.received;
      stats.workletPeak = report.peak;
      const r = conn.responses.get(report.id);
      if (!r || r.cut) return;
      r.drained = true;
      setTimeout(() => {
        r.playedMs = Math.min(r.receivedMs, (1000 * report.played) / conn.ctx.sampleRate);
        ack(conn, r, false);
        heardUpTo(conn, r, r.playedMs);
      }, outputLatencyMs(conn.ctx));
    }
    renderStats();
  }

  // Over WebRTC the server acknowledges what its track sent (counted as played): that is the reply audio the
  // page received, heard from where the page's speaker first read it loud (`output_audio_buffer.started`).
  function sentOnTrack(conn, r, playedMs) {
    r.receivedMs = r.playedMs = r.ackedMs = Math.max(r.ackedMs, playedMs);
    const responses = [...conn.responses.values()];
    stats.receivedMs = responses.reduce((sum, x) => sum + x.receivedMs, 0);
    stats.playedMs = responses.reduce((sum, x) => sum + x.ackedMs, 0);
    heardUpTo(conn, r, r.playedMs);
  }

  function ack(conn, response, truncateHere) {
    const playedMs = Math.round(response.playedMs * 10) / 10;
    if (!truncateHere && playedMs <= response.ackedMs) return;
    response.ackedMs = playedMs;
    response.lastAckAt = performance.now();
    const event = { type: "playback.ack", response_id: response.id, played_ms: playedMs };
    if (response.itemId) event.item_id = response.itemId;
    if (truncateHere) event.truncate = true;
    send(conn, event);
    stats.acksSent += 1;
    stats.playedMs = [...conn.responses.values()].reduce((sum, r) => sum + r.ackedMs, 0);
    renderStats();
  }

  function decodePcm16(b64) {
    const binary = atob(b64);
    const count = binary.length >> 1;
    const samples = new Float32Array(count);
    for (let i = 0; i < count; i += 1) {
      let v = binary.charCodeAt(2 * i) | (binary.charCodeAt(2 * i + 1) << 8);
      if (v >= 0x8000) v -= 0x10000;
      samples[i] = v / 32768;
    }
    return samples;
  }

  // Reply `r` has been heard for `ms` from its first audio: its span on the timeline's "played" lane
  // (the page's clock mapped onto the media clock) and its turn marker.
  function heardUpTo(conn, r, ms) {
    if (r.heardAt === null || conn.mediaOffsetMs === null) return;
    const startMs = r.heardAt - conn.mediaOffsetMs;
    timeline.upsert("played", "played", r.id, startMs, startMs + ms, `reply audio played (${r.id})`);
    if (r.heardAfterSpeechMs === null) {
      const before = timeline.runs.you.filter((run) => run.kind === "speech" && run.startMs < startMs);
      const last = before[before.length - 1];
      if (last && last.endMs <= startMs) r.heardAfterSpeechMs = startMs - last.endMs;
    }
    renderResponse(conn, r);
  }

  // Over WebRTC the page sends no appends: the input media clock is the call's track, whose units the server
  // names in `unit_end_ms`. The event that arrived soonest after its unit ended places that clock on the
  // page's (late by the uplink, the step and the channel: the page's own observations land that much early).
  function placeMediaClock(conn, unitEndMs) {
    const offset = performance.now() - unitEndMs;
    if (conn.mediaOffsetMs === null || offset < conn.mediaOffsetMs) conn.mediaOffsetMs = offset;
    stats.sentMs = Math.max(stats.sentMs, unitEndMs);
    for (const at of conn.micLoudAt.splice(0)) micLoud(conn, at);
  }

  // Over WebRTC: a loud reading of the microphone (every 10 ms) is speech on the "you" lane.
  function micLoud(conn, at) {
    if (live !== conn) return;
    if (conn.mediaOffsetMs === null) {
      conn.micLoudAt.push(at);
      return;
    }
    const endMs = at - conn.mediaOffsetMs;
    timeline.span("you", "speech", Math.max(0, endMs - MIC_READING_MS), endMs,
      { title: "you spoke (the page heard speech)", gapMs: 2 * MIC_READING_MS });
  }

  // A unit the model spoke (its audio delta; its transcript delta, which over WebRTC is all the page gets of
  // it): on the model lane once per unit.
  function spokeUnit(conn, r, event) {
    if (event.unit_end_ms !== undefined && r.lastUnitMs === event.unit_end_ms) return;
    r.lastUnitMs = event.unit_end_ms;
    stats.units.speak += 1;
    const [startMs, endMs] = unitSpan(conn, event);
    if (r.firstUnitMs === null) {
      r.firstUnitMs = startMs;
      renderResponse(conn, r);
    }
    timeline.span("model", "speak", startMs, endMs, { key: r.id, title: `spoke (${r.id})`, gapMs: 1e9 });
    renderStats();
  }

  // A function call the model made: a mark on the model lane where it was heard (the input media clock), an
  // entry in the transcript with its arguments and output, and the answer at once: the Tools field's fixed
  // result for it (text as is, else JSON), or an error output naming the missing tool; the model then goes
  // on (`response.done` sends the `response.create`).
  function functionCall(conn, event) {
    if (!event.call_id || conn.calls.has(event.call_id)) return;
    const name = event.name || conn.callNames.get(event.item_id) || "function";
    const atMs = stats.sentMs;
    const fixed = Object.prototype.hasOwnProperty.call(toolResults, name) ? toolResults[name] : undefined;
    const output = fixed === undefined ? JSON.stringify({ error: `the playground has no result for ${name}` })
      : typeof fixed === "string" ? fixed : JSON.stringify(fixed);
    conn.calls.set(event.call_id, { name, arguments: event.arguments, atMs, output });
    const line = `${name}(${event.arguments || ""})`;
    timeline.span("model", "call", Math.max(0, atMs - CALL_MARK_MS), atMs,
      { key: event.call_id, title: `called ${line} at ${Math.round(atMs)} ms → ${output}`, gapMs: -Infinity });
    const entry = transcript.entry("model", `call:${event.call_id}`);
    entry.text.textContent = `called ${line} → ${output}`;
    entry.meta.textContent = `function call heard at ${Math.round(atMs)} ms of your audio (input media clock)`;
    entry.li.dataset.status = "call";
    entry.li.dataset.call = name;
    send(conn, { type: "conversation.item.create",
      item: { type: "function_call_output", call_id: event.call_id, output } });
    if (event.response_id) conn.callResponses.add(event.response_id);
  }

  // Where on the input media clock a unit-stamped event belongs (the unit's span), else the present.
  function unitSpan(conn, event) {
    const period = (conn.session.capabilities || {}).chunk_period_ms || 100;
    const endMs = event.unit_end_ms ?? stats.sentMs;
    return [Math.max(0, endMs - period), endMs];
  }

  function responseEntry(conn, id) {
    let r = conn.responses.get(id);
    if (!r) {
      r = { id, itemId: null, entry: transcript.entry("model", id), transcript: "", metrics: {},
        status: "in_progress", reason: null, receivedMs: 0, playedMs: 0, ackedMs: 0, lastAckAt: 0, cut: false,
        drained: false, heardAt: null, heardAfterSpeechMs: null, firstAudioAt: null, firstUnitMs: null, lastUnitMs: undefined };
      conn.responses.set(id, r);
      renderResponse(conn, r);
    }
    return r;
  }

  function renderResponse(conn, r) {
    transcript.reply(r.entry, r);
    const at = r.heardAt !== null && conn.mediaOffsetMs !== null ? r.heardAt - conn.mediaOffsetMs : r.firstUnitMs;
    if (at === null) return;
    const m = r.metrics;
    const ms = (v) => (v === undefined || v === null ? "—" : `${Math.round(v)} ms`);
    const split = PlaygroundView.stageSplit(m.model_stages_ms);
    const play = r.heardAt !== null && r.firstAudioAt !== null ? Math.max(0, r.heardAt - r.firstAudioAt) : null;
    const path = PlaygroundView.pathSplit(r.heardAfterSpeechMs, m.model_stages_ms, play);
    const lines = [`TTFT ${ms(m.ttft_ms)}`, `TTFP ${ms(m.ttfp_ms)}`, `you→audio ${ms(r.heardAfterSpeechMs)}`];
    if (path) lines.push(path.line);
    if (split) lines.push(split.line);
    timeline.turn(r.id, at, lines,
      `${r.id}: server TTFT ${ms(m.ttft_ms)}, TTFP ${ms(m.ttfp_ms)} (from the model request's start); ` +
      `end of your speech → first audio heard ${ms(r.heardAfterSpeechMs)} (this page's clock)` +
      (path ? `; the whole path: ${path.title}` : "") +
      (split ? `; the model's split: ${split.title}` : ""));
  }

  // What the model heard of user item `id`: an entry in the transcript, where the server put the item.
  function heardEntry(conn, id) {
    let h = conn.heard.get(id);
    if (!h) {
      h = { entry: transcript.entry("user", id), text: "" };
      conn.heard.set(id, h);
      if (conn.items.includes(id)) transcript.place(h.entry, id, conn.items);
    }
    return h;
  }

  // Item `id` entered the conversation after `previousId` (absent: first), OpenAI's insertion rule; an
  // entry already shown for it moves there.
  function itemAdded(conn, id, previousId) {
    if (!id || conn.items.includes(id)) return;
    // OpenAI's rule: `previous_item_id: null` is first; none given, or an item never announced: the end.
    const before = previousId ? conn.items.indexOf(previousId) : -1;
    const at = previousId === null ? 0 : before < 0 ? conn.items.length : before + 1;
    conn.items.splice(at, 0, id);
    const h = conn.heard.get(id);
    const r = [...conn.responses.values()].find((x) => x.itemId === id);
    const entry = h ? h.entry : r && r.entry;
    if (entry) transcript.place(entry, id, conn.items);
  }

  // Server-anchored metrics ride several events; a later value never erases an earlier observed one.
  function adoptMetrics(r, metrics) {
    if (!metrics) return;
    for (const [name, value] of Object.entries(metrics)) {
      if (value !== null && value !== undefined) r.metrics[name] = value;
    }
  }

  function handle(conn, event) {
    if (conn.ws.kind === "webrtc" && typeof event.unit_end_ms === "number") placeMediaClock(conn, event.unit_end_ms);
    const r = event.response_id ? responseEntry(conn, event.response_id) : null;
    if (r) adoptMetrics(r, event.response_request_metrics);
    switch (event.type) {
      case "session.created":
        conn.session = event.session;
        $("stat-session").textContent = `${event.session.id} (${event.session.model})`;
        $("apply").disabled = false;
        startAudio(conn).catch((error) => fail("audio-failed", `Audio could not start: ${error.message}`));
        break;
      case "session.updated":
        conn.session = { ...conn.session, ...event.session };
        break;
      case "response.created": {
        const created = responseEntry(conn, event.response.id);
        adoptMetrics(created, event.response_request_metrics);
        renderResponse(conn, created);
        break;
      }
      case "response.output_item.added":
        if (event.item && event.item.type === "function_call") conn.callNames.set(event.item.id, event.item.name);
        if (r && event.item) {
          r.itemId = event.item.id;
          if (conn.items.includes(r.itemId)) transcript.place(r.entry, r.itemId, conn.items);
        }
        break;
      case "conversation.item.added":
        if (event.item) itemAdded(conn, event.item.id, event.previous_item_id);
        break;
      case "input_audio_buffer.committed":
        itemAdded(conn, event.item_id, event.previous_item_id);
        break;
      case "response.speak":
        if (r && event.item_id) r.itemId = event.item_id;
        break;
      case "response.output_audio.delta": {
        if (r.firstAudioAt === null) r.firstAudioAt = performance.now();
        const samples = decodePcm16(event.delta);
        const rate = event.sample_rate_hz || conn.session.capabilities.output_sample_rate_hz || 24000;
        r.receivedMs += (1000 * samples.length) / rate;
        stats.receivedMs += (1000 * samples.length) / rate;
        if (!r.cut && conn.playback) {
          conn.playback.port.postMessage({ type: "audio", id: r.id, samples, rate }, [samples.buffer]);
        }
        spokeUnit(conn, r, event);
        break;
      }
      case "response.output_audio_transcript.delta":
      case "response.output_text.delta":
        r.transcript += event.delta || "";
        if (event.unit_end_ms !== undefined) spokeUnit(conn, r, event);
        renderResponse(conn, r);
        break;
      case "response.output_audio_transcript.done":
        r.transcript = event.transcript;
        renderResponse(conn, r);
        break;
      case "response.output_text.done":
        r.transcript = event.text;
        renderResponse(conn, r);
        break;
      case "response.done": {
        const done = responseEntry(conn, event.response.id);
        adoptMetrics(done, event.response_request_metrics);
        done.status = event.response.status;
        const details = event.response.status_details || {};
        done.reason = details.reason;
        if (done.status === "failed" && details.error) {
          // a failure within the reply (the model's step, a call it could not make): shown on the reply,
          // counted; the session goes on, as OpenAI's clients take a failed response
          done.reason = details.error.code;
          stats.errors.push(details.error.code);
          renderStats();
        }
        if (conn.playback && !done.cut) conn.playback.port.postMessage({ type: "end", id: done.id });
        if (done.status === "cancelled" && !done.cut && conn.playback) {
          done.cut = true;
          conn.playback.port.postMessage({ type: "clear" });
        }
        if (done.status === "cancelled") {
          timeline.flag("model", done.id, "cancelled");
          timeline.flag("played", done.id, "cancelled");
        }
        renderResponse(conn, done);
        // the calls of a finished response were answered: ask the model to go on (it does not by itself)
        if (conn.callResponses.delete(done.id) && done.status === "completed") send(conn, { type: "response.create" });
        break;
      }
      case "response.function_call_arguments.done":
        functionCall(conn, event);
        break;
      case "response.listen": {
        stats.units.listen += 1;
        const [startMs, endMs] = unitSpan(conn, event);
        timeline.span("model", "listen", startMs, endMs, { title: "listened", gapMs: 1 });
        break;
      }
      case "input_audio_buffer.speech_started":
        timeline.upsert("you", "vad", event.item_id, event.audio_start_ms, event.audio_start_ms,
          `server VAD: speech from ${event.audio_start_ms} ms`);
        break;
      case "input_audio_buffer.speech_stopped": {
        const run = timeline.runs.you.find((x) => x.kind === "vad" && x.key === event.item_id);
        timeline.upsert("you", "vad", event.item_id, run ? run.startMs : event.audio_end_ms, event.audio_end_ms,
          `server VAD: speech ${run ? run.startMs : "?"}–${event.audio_end_ms} ms`);
        break;
      }
      case "conversation.item.input_audio_transcription.delta": {
        const h = heardEntry(conn, event.item_id);
        h.text += event.delta || "";
        transcript.heard(h.entry, h.text, false);
        break;
      }
      case "conversation.item.input_audio_transcription.completed": {
        const h = heardEntry(conn, event.item_id);
        h.text = event.transcript;
        transcript.heard(h.entry, h.text, true);
        break;
      }
      case "playback.acknowledged":
        stats.acksAcknowledged += 1;
        stats.acknowledgedMs[event.response_id] = event.played_ms;
        if (conn.ws.kind === "webrtc") sentOnTrack(conn, r, event.played_ms);
        renderStats();
        break;
      case "output_audio_buffer.started": // WebRTC: the reply's first frame left on the server's track
        if (r.firstAudioAt === null) r.firstAudioAt = performance.now();
        window.duplexkitTransport.whenHeard(performance.now(), (at) => {
          if (live !== conn || r.heardAt !== null || r.cut) return;
          r.heardAt = at;
          heardUpTo(conn, r, r.playedMs);
        });
        break;
      case "output_audio_buffer.stopped": // WebRTC: its last frame left; nothing more will be played
        r.drained = true;
        break;
      case "output_audio_buffer.cleared": // WebRTC: the server cut it from its track
        r.cut = true;
        timeline.flag("played", r.id, "cancelled");
        break;
      case "session.closed":
        conn.closedReason = event.reason;
        break;
      case "error":
        serverError(conn, event.error || {});
        break;
      default:
        break;
    }
  }

  function serverError(conn, error) {
    if (BENIGN_CODES.has(error.code)) {
      stats.benign[error.code] = (stats.benign[error.code] || 0) + 1;
      renderStats();
      return;
    }
    stats.errors.push(error.code);
    if (error.code === "session_capacity_exhausted") {
      conn.refused = error;
      fail("capacity", `The server is full (${error.message}).` +
        (error.retryable ? " This is temporary: retry in a moment." : ""), Boolean(error.retryable));
      return;
    }
    const where = error.param ? ` (${error.param})` : "";
    fail(error.code || "server-error", `The server refused something: ${error.code}${where}: ${error.message}`,
      Boolean(error.retryable) && !conn.opened);
  }

  function closed(conn, close) {
    stop(conn);
    stats.closed = { code: close.code, reason: close.reason, session: conn.closedReason };
    setStatus("closed", "Not connected.");
    if (conn.refused) return; // the capacity refusal already says what happened
    if (!conn.opened) {
      if (authRequired) {
        fail("auth-refused", "The server refused the connection: the API key was not accepted " +
          "(or the server is unreachable).");
        $("api-key").focus();
      } else {
        fail("unreachable", "The server could not be reached.", true);
      }
      return;
    }
    if (conn.userClosed && close.code === 1000) return;
    const why = conn.closedReason ? `session closed: ${conn.closedReason}` : "no session.closed was received";
    fail("closed", `The connection closed (code ${close.code}${close.reason ? `, ${close.reason}` : ""}; ${why}).`,
      true);
  }

  function stop(conn) {
    if (live === conn) live = null;
    if (conn.ws.kind === "webrtc") window.duplexkitTransport.onMicLoud(null);
    for (const track of conn.stream.getTracks()) track.stop();
    if (conn.capture) conn.capture.port.postMessage({ type: "stop" });
    conn.ctx.close();
    $("connect").disabled = false;
    $("disconnect").disabled = true;
    $("interrupt").disabled = true;
    $("apply").disabled = true;
  }

  $("connect-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (!live) connect().then(() => { if (live) $("disconnect").disabled = false; });
  });
  $("retry").addEventListener("click", () => {
    if (!live) connect().then(() => { if (live) $("disconnect").disabled = false; });
  });
  $("disconnect").addEventListener("click", () => {
    if (!live) return;
    live.userClosed = true;
    send(live, { type: "session.close", reason: "client_close" });
  });
  $("interrupt").addEventListener("click", () => {
    const conn = live;
    if (conn && conn.ws.kind === "webrtc") { // the server stops its track; what it sent counts as played
      send(conn, { type: "output_audio_buffer.clear" });
      return;
    }
    if (!conn || !audible(conn).length) return;
    queue(conn, async () => {
      await truncate(conn);
      send(conn, { type: "output_audio_buffer.clear" });
    });
  });
  $("settings-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const session = checkSettings();
    if (session && live && live.opened) {
      clearAlert();
      send(live, { type: "session.update", session });
    }
  });
  renderStats();
})();
