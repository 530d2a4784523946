// duplexkit playground: what the page shows, whatever carries the audio. `Timeline` draws the session on one
// time axis (the input media clock: milliseconds of microphone audio sent); `Transcript` lists what the
// model heard and what it said, in the order they happened. Neither knows about sockets or audio nodes: the
// connection code (playground.js) feeds them.
"use strict";
const PlaygroundView = (() => {
  const WINDOW_S = 30; // the view shows about this much of the present at once, on any width
  const MIN_PX_PER_S = 12; // narrower screens scroll sooner rather than squeeze units together
  const TICK_STEPS_S = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600];
  const MIN_TICK_PX = 56;
  const LANES = ["you", "model", "played"];

  function clock(seconds) {
    const s = Math.floor(seconds);
    return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Runs of activity on three lanes, turn markers and a time axis, all placed by milliseconds on the media
  // clock. Adjacent items of the same kind and key merge into one run, so a long session stays a few hundred
  // elements. The view follows the present while it is scrolled to the end; scrolled back, it stays put
  // until "Follow live" (or scrolling to the end again).
  class Timeline {
    constructor(root) {
      this.scroller = root.querySelector(".scroller");
      this.track = root.querySelector(".track");
      this.rows = Object.fromEntries(LANES.map((lane) => [lane, root.querySelector(`.lane-row[data-lane="${lane}"]`)]));
      this.axis = root.querySelector(".axis");
      this.turnsRow = root.querySelector(".lane-row[data-lane=turns]");
      this.follow = root.querySelector(".follow");
      this.summary = root.querySelector(".summary");
      this.pinned = true;
      this.scroller.addEventListener("scroll", () => {
        const atEnd = this.scroller.scrollLeft + this.scroller.clientWidth >= this.scroller.scrollWidth - 4;
        if (atEnd !== this.pinned) {
          this.pinned = atEnd;
          this.follow.hidden = atEnd;
        }
      }, { passive: true });
      this.follow.addEventListener("click", () => {
        this.pinned = true;
        this.follow.hidden = true;
        this.scroller.scrollLeft = this.scroller.scrollWidth;
      });
      new ResizeObserver(() => this.schedule(true)).observe(this.scroller);
      this.reset();
    }

    reset() {
      this.runs = Object.fromEntries(LANES.map((lane) => [lane, []]));
      this.turns = new Map(); // response id -> {atMs, lines, title, node}
      this.endMs = 0;
      this.pxPerS = 0;
      for (const row of [...Object.values(this.rows), this.axis, this.turnsRow]) row.replaceChildren();
      this.summary.textContent = "Nothing yet: connect and speak.";
      this.schedule(true);
    }

    // Activity on `lane` from `startMs` to `endMs`: merged into the lane's last run when it has the same
    // kind and key and starts where that run ends (within `gapMs`).
    span(lane, kind, startMs, endMs, { key = "", title = "", gapMs = 1 } = {}) {
      const runs = this.runs[lane];
      const last = runs[runs.length - 1];
      if (last && last.kind === kind && last.key === key && startMs - last.endMs <= gapMs && startMs >= last.startMs) {
        last.endMs = Math.max(last.endMs, endMs);
        if (title) last.title = title;
      } else {
        const node = el("span", `run ${kind}`);
        this.rows[lane].append(node);
        runs.push({ kind, key, startMs, endMs, title, node, flags: new Set() });
      }
      this.extend(endMs);
    }

    // The run of `kind` for `key` on `lane` (a reply's played audio, server VAD's view of an utterance):
    // created on its first report, then grown or cut in place.
    upsert(lane, kind, key, startMs, endMs, title) {
      const run = this.runs[lane].find((r) => r.kind === kind && r.key === key);
      if (!run) {
        this.span(lane, kind, startMs, endMs, { key, title, gapMs: -Infinity });
        return;
      }
      Object.assign(run, { startMs, endMs, title });
      this.extend(endMs);
    }

    // Marks every run of `key` on `lane` (e.g. a cancelled reply).
    flag(lane, key, flag) {
      for (const run of this.runs[lane]) if (run.key === key) run.flags.add(flag);
      this.schedule();
    }

    // A turn marker at `atMs` (where the reply was first heard), labelled with `lines`.
    turn(key, atMs, lines, title) {
      let turn = this.turns.get(key);
      if (!turn) {
        turn = { node: el("span", "turn") };
        turn.node.dataset.response = key;
        this.turnsRow.append(turn.node);
        this.turns.set(key, turn);
      }
      Object.assign(turn, { atMs, lines, title });
      turn.node.replaceChildren(...lines.map((line) => el("span", "", line)));
      this.extend(atMs);
    }

    extend(ms) {
      this.endMs = Math.max(this.endMs, ms);
      this.schedule();
    }

    schedule(rescale = false) {
      this.rescale = this.rescale || rescale;
      if (this.frame) return;
      this.frame = requestAnimationFrame(() => {
        this.frame = 0;
        this.render();
      });
    }

    render() {
      const view = this.scroller.clientWidth;
      const pxPerS = Math.max(MIN_PX_PER_S, view / WINDOW_S);
      const rescaled = this.rescale || pxPerS !== this.pxPerS;
      this.rescale = false;
      this.pxPerS = pxPerS;
      const x = (ms) => (ms / 1000) * pxPerS;
      this.track.style.width = `${Math.max(view, Math.ceil(x(this.endMs) + 8))}px`;
      for (const lane of LANES) {
        for (const run of this.runs[lane]) {
          run.node.style.left = `${x(run.startMs)}px`;
          run.node.style.width = `${Math.max(1, x(run.endMs) - x(run.startMs))}px`;
          run.node.title = run.title;
          for (const flag of run.flags) run.node.classList.add(flag);
        }
      }
      this.layoutTurns(x);
      if (rescaled || this.axis.dataset.endMs !== String(Math.ceil(this.endMs / 1000))) this.drawAxis(x);
      if (this.pinned) this.scroller.scrollLeft = this.scroller.scrollWidth;
      this.summarise();
    }

    // Labels that would overlap the previous one drop to the next of two levels.
    layoutTurns(x) {
      const rights = [-Infinity, -Infinity];
      const turns = [...this.turns.values()].sort((a, b) => a.atMs - b.atMs);
      for (const turn of turns) {
        const left = x(turn.atMs);
        turn.node.style.left = `${left}px`;
        turn.node.title = turn.title;
        const level = rights[0] <= left ? 0 : rights[1] <= left ? 1 : rights[0] <= rights[1] ? 0 : 1;
        turn.node.dataset.level = String(level);
        rights[level] = left + turn.node.offsetWidth + 4;
      }
    }

    drawAxis(x) {
      const step = TICK_STEPS_S.find((s) => s * this.pxPerS >= MIN_TICK_PX) || TICK_STEPS_S[TICK_STEPS_S.length - 1];
      const ticks = [];
      for (let s = 0; s * 1000 <= this.endMs + step * 1000; s += step) {
        const tick = el("span", "tick", clock(s));
        tick.style.left = `${x(s * 1000)}px`;
        ticks.push(tick);
      }
      this.axis.replaceChildren(...ticks);
      this.axis.dataset.endMs = String(Math.ceil(this.endMs / 1000));
    }

    summarise() {
      const total = (lane, kind) => this.runs[lane].filter((r) => r.kind === kind)
        .reduce((sum, r) => sum + r.endMs - r.startMs, 0) / 1000;
      this.summary.textContent = `${clock(this.endMs / 1000)} on the timeline: you spoke ${total("you", "speech").toFixed(1)} s, ` +
        `the model listened ${total("model", "listen").toFixed(1)} s and spoke ${total("model", "speak").toFixed(1)} s, ` +
        `${total("played", "played").toFixed(1)} s of reply audio played; ${this.turns.size} replies.`;
    }
  }

  // The conversation as a list: what the model heard of each user utterance (streaming, then final) and
  // each reply with its timing, in the server's order of their items.
  class Transcript {
    constructor(list, empty) {
      this.list = list;
      this.empty = empty;
    }

    reset() {
      this.list.replaceChildren();
      this.empty.hidden = false;
    }

    // A new entry for `role` ("user" or "model"), last for now: `place` moves it where the server puts its
    // item.
    entry(role, id) {
      const li = el("li");
      li.dataset.role = role;
      li.dataset[role === "user" ? "item" : "response"] = id;
      const who = el("p", "who", role === "user" ? "You (as the model heard it)" : "Model");
      const text = el("p", "text", "…");
      const meta = el("p", "meta");
      li.append(who, text, meta);
      this.show(li, null);
      this.empty.hidden = true;
      return { li, text, meta };
    }

    // Put `entry`, conversation item `itemId`, right after the entry of the nearest item before it in
    // `order` (the item ids in the server's order), first when none is shown. A user item whose transcript
    // completed after the reply to it was created is placed before that reply (its `previous_item_id`).
    place(entry, itemId, order) {
      entry.li.dataset.item = itemId;
      const shown = new Map([...this.list.children].map((li) => [li.dataset.item, li]));
      let after = null;
      for (let at = order.indexOf(itemId) - 1; at >= 0 && !after; at -= 1) after = shown.get(order[at]) || null;
      this.show(entry.li, after ? after.nextElementSibling : this.list.firstElementChild);
    }

    // Insert `li` before `before` (null: at the end), following the conversation unless scrolled back.
    show(li, before) {
      const atEnd = this.list.scrollTop + this.list.clientHeight >= this.list.scrollHeight - 4;
      this.list.insertBefore(li, before);
      if (atEnd) this.list.scrollTop = this.list.scrollHeight;
    }

    // What the model heard of user item `id` so far; `final` once the utterance's transcript is complete.
    heard(entry, text, final) {
      entry.text.textContent = text || "…";
      entry.li.dataset.status = final ? "final" : "streaming";
      entry.meta.textContent = final ? "heard (final)" : "hearing…";
    }

    // A reply's text, status and timing: the server's TTFT/TTFP (request-start clock) and the page's own
    // end of speech → first audio heard; a value not observed is said to be, never shown as 0.
    reply(entry, { transcript, status, reason, metrics, heardAfterSpeechMs }) {
      entry.text.textContent = transcript || "…";
      const parts = [];
      parts.push(metrics.ttft_ms !== undefined ? `TTFT ${Math.round(metrics.ttft_ms)} ms` : "TTFT not observed yet");
      parts.push(metrics.ttfp_ms !== undefined ? `TTFP ${Math.round(metrics.ttfp_ms)} ms` : "TTFP not observed yet");
      if (metrics.source) parts.push(`source: ${metrics.source}`);
      parts.push(heardAfterSpeechMs === null ? "end of your speech → first audio: not observed yet"
        : `end of your speech → first audio ${Math.round(heardAfterSpeechMs)} ms (page clock)`);
      let state = status === "in_progress" ? "streaming" : status;
      if (reason) state += ` (${reason})`;
      parts.push(state);
      entry.meta.textContent = parts.join(" · ");
      const data = entry.li.dataset;
      data.status = status;
      if (metrics.ttft_ms !== undefined) data.ttftMs = String(metrics.ttft_ms);
      if (metrics.ttfp_ms !== undefined) data.ttfpMs = String(metrics.ttfp_ms);
      if (metrics.source) data.source = metrics.source;
      if (heardAfterSpeechMs !== null) data.heardAfterSpeechMs = String(heardAfterSpeechMs);
    }
  }

  // The model's own latency split of a reply (`model_stages_ms` in its metrics: the cascade's stages, see
  // docs/models.md), as one short marker line and a longer title; `null` when the model reports none.
  const STAGE_LABELS = [
    ["vad_tail", "tail", "VAD tail (last voiced frame → pause acted on)"],
    ["smart_turn", "turn", "Smart Turn (→ end of turn established)"],
    ["final_decode", "asr", "final decode"],
    ["llm_first_token", "llm", "LLM first token"],
    ["first_phrase", "phrase", "first phrase (first token → its audio ready)"],
    ["tts_first_phrase", "tts", "of which synthesis"],
    ["first_audio_sent", "send", "first audio sent (ready → released)"],
    ["total", "total", "end of speech → first audio sent (model clock)"],
  ];
  function stageSplit(stages) {
    if (!stages) return null;
    const known = STAGE_LABELS.filter(([key]) => typeof stages[key] === "number");
    if (!known.length) return null;
    const ms = (v) => `${Math.round(v)}`;
    return {
      line: known.filter(([key]) => key !== "total" && key !== "tts_first_phrase")
        .map(([key, short]) => `${short} ${ms(stages[key])}`).join(" · "),
      title: known.map(([key, , long]) => `${long} ${ms(stages[key])} ms`).join("; "),
    };
  }

  // The whole path of a reply as the page can split it (issue #47): `you→audio` (end of your last speech
  // chunk → first audio heard, page clock) = `wire` (the rest: your last chunk's way up, the server's
  // units before the model's end of speech is placed, the reply's way down) + `model` (the model's own
  // `total`: end of speech → first audio sent, server clock) + `play` (first audio received → heard:
  // the playback worklet and the output latency, page clock). Sums to `you→audio` by construction;
  // `null` when a part is not observed.
  function pathSplit(heardAfterSpeechMs, stages, playMs) {
    const model = stages && typeof stages.total === "number" ? stages.total : null;
    if (heardAfterSpeechMs === null || heardAfterSpeechMs === undefined || model === null) return null;
    if (playMs === null || playMs === undefined) return null;
    const wire = heardAfterSpeechMs - model - playMs;
    const ms = (v) => `${Math.round(v)}`;
    return {
      wire, model, play: playMs,
      line: `wire ${ms(wire)} · model ${ms(model)} · play ${ms(playMs)}`,
      title: `end of your speech → first audio heard ${ms(heardAfterSpeechMs)} ms = the wire (up, units, ` +
        `down; page clock less the rest) ${ms(wire)} ms + the model (end of speech → first audio sent, ` +
        `server clock) ${ms(model)} ms + playback (received → heard, page clock) ${ms(playMs)} ms`,
    };
  }

  return { Timeline, Transcript, stageSplit, pathSplit };
})();
