// The dashboard: polls v1/status every second and draws it; streams chat
// answers from v1/chat/completions. Everything the server sends is written
// as text (textContent), never as markup. The API token, when the server
// wants one, is kept in sessionStorage: this tab only.
"use strict";

(() => {
  const TOKEN_KEY = "provider.token";
  const POLL_MS = 1000;
  const SVG = "http://www.w3.org/2000/svg";

  const $ = (sel, root = document) => root.querySelector(sel);
  const field = (root, name) => root.querySelector(`[data-field="${name}"]`);

  let token = sessionStorage.getItem(TOKEN_KEY) || "";
  let pollTimer = 0;
  let inFlight = false;
  let needToken = false;
  const cards = new Map();

  function headers(extra) {
    const h = Object.assign({}, extra);
    if (token) h.Authorization = "Bearer " + token;
    return h;
  }

  function setText(el, text) {
    if (el.textContent !== text) el.textContent = text;
  }

  function setConn(state, text) {
    const el = $("#conn");
    el.dataset.state = state;
    setText(el, text);
  }

  // Formatting.

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return (i === 0 ? String(n) : n.toFixed(n < 10 ? 1 : 0)) + " " + units[i];
  }

  function millis(v) {
    if (v === null || v === undefined) return "–";
    if (v < 1) return v.toFixed(2) + " ms";
    if (v < 1000) return v.toFixed(v < 10 ? 1 : 0) + " ms";
    return (v / 1000).toFixed(2) + " s";
  }

  function rate(v) {
    return v < 10 ? v.toFixed(1) : v.toFixed(0);
  }

  function duration(s) {
    s = Math.floor(s);
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${m}m`;
    if (m) return `${m}m ${s % 60}s`;
    return `${s}s`;
  }

  function clock(ms) {
    return new Date(ms).toLocaleTimeString([], { hour12: false });
  }

  // The token.

  function askToken(message) {
    needToken = true;
    clearTimeout(pollTimer);
    $("#auth").hidden = false;
    const err = $("#auth-error");
    err.textContent = message || "";
    err.hidden = !message;
    setConn("token", "token needed");
    $("#auth-token").focus();
  }

  $("#auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const v = $("#auth-token").value.trim();
    if (!v) return;
    token = v;
    sessionStorage.setItem(TOKEN_KEY, v);
    $("#auth-token").value = "";
    $("#auth").hidden = true;
    $("#forget").hidden = false;
    needToken = false;
    poll();
  });

  $("#forget").addEventListener("click", () => {
    token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    $("#forget").hidden = true;
    poll();
  });

  // Status.

  async function poll() {
    clearTimeout(pollTimer);
    if (inFlight) return;
    inFlight = true;
    try {
      const r = await fetch("v1/status", { headers: headers(), cache: "no-store" });
      if (r.status === 401) {
        askToken(token ? "The server refused this token." : "");
        return;
      }
      if (r.ok) {
        render(await r.json());
        setConn("ok", "live");
      } else {
        setConn("error", "status " + r.status);
      }
    } catch (e) {
      setConn("offline", "unreachable");
    } finally {
      inFlight = false;
    }
    if (!needToken) pollTimer = setTimeout(poll, POLL_MS);
  }

  function render(s) {
    setText($("#uptime"), "up " + duration(s.uptime_seconds) + (s.loading ? " · loading" : ""));
    const box = $("#models");
    const seen = new Set();
    for (const m of s.models) {
      seen.add(m.name);
      const c = card(m.name);
      renderModel(c, m, s.series, s.uptime_seconds);
      box.appendChild(c); // keeps the server's order
    }
    for (const [name, c] of cards) {
      if (!seen.has(name)) {
        c.remove();
        cards.delete(name);
      }
    }
    $("#no-models").hidden = s.models.length > 0;
    renderChoices(s.models);
    renderRefusals(s);
  }

  function card(name) {
    let c = cards.get(name);
    if (!c) {
      c = $("#model-card").content.firstElementChild.cloneNode(true);
      c.dataset.model = name;
      field(c, "name").textContent = name;
      cards.set(name, c);
    }
    return c;
  }

  function renderModel(c, m, geometry, uptime) {
    const state = field(c, "state");
    state.dataset.state = m.state;
    setText(state, m.state);
    setText(field(c, "running"), String(m.running));
    setText(field(c, "max"), String(m.max_concurrent));
    setText(field(c, "waiting"), String(m.waiting));

    const share = m.kv_grant_bytes > 0 ? Math.min(1, m.kv_used_bytes / m.kv_grant_bytes) : 0;
    const fill = field(c, "kv-fill");
    fill.style.width = (share * 100).toFixed(1) + "%";
    fill.classList.toggle("high", share > 0.85);
    fill.parentElement.setAttribute("aria-valuenow", (share * 100).toFixed(0));
    setText(field(c, "kv"), `${bytes(m.kv_used_bytes)} of ${bytes(m.kv_grant_bytes)} (${(share * 100).toFixed(1)}%)`);

    const pc = m.prefix_cache;
    let hits = "off";
    if (pc && pc.hit_rate === null) hits = "no admissions yet";
    else if (pc) hits = `${(pc.hit_rate * 100).toFixed(1)}% (${pc.hits} of ${pc.hits + pc.misses})`;
    setText(field(c, "hit-rate"), hits);

    setText(field(c, "requests"), String(m.requests));
    setText(field(c, "tokens"), String(m.completion_tokens));

    const live = m.live;
    setText(field(c, "ttft"), live.ttft_ms ? millis(live.ttft_ms.p50) : "–");
    setText(field(c, "tpot"), live.tpot_ms ? millis(live.tpot_ms.p50) : "–");
    setText(field(c, "tps"), rate(live.tokens_per_second));
    // The lines start at the server's start when that is more recent than
    // the series' span: there is no data before it.
    const span = Math.min(geometry.buckets, Math.max(2, Math.ceil(uptime / geometry.bucket_seconds)));
    spark(c.querySelector('[data-spark="ttft"]'), m.series.ttft_ms.slice(-span), millis, geometry.bucket_seconds);
    spark(c.querySelector('[data-spark="tpot"]'), m.series.tpot_ms.slice(-span), millis, geometry.bucket_seconds);
    spark(c.querySelector('[data-spark="tps"]'), m.series.tokens_per_second.slice(-span), (v) => rate(v) + " tok/s", geometry.bucket_seconds);

    const foot = [`last ${duration(live.window_seconds)}: ${live.requests} requests`];
    if (live.ttft_ms) foot.push(`TTFT p95 ${millis(live.ttft_ms.p95)}`);
    if (live.tpot_ms) foot.push(`TPOT p95 ${millis(live.tpot_ms.p95)}`);
    if (m.decode_tokens_per_second !== undefined) foot.push(`engine decode ${rate(m.decode_tokens_per_second)} tok/s`);
    if (m.preemptions) foot.push(`${m.preemptions} preemptions`);
    if (m.wedge_suspected) foot.push("wedge suspected");
    setText(field(c, "foot"), foot.join(" · "));
  }

  // spark draws values (null: no data), one per bucket of the given
  // seconds, as a line with a dot on the last value.
  function spark(svg, values, format, bucketSeconds) {
    const W = 300, H = 48, PAD = 4;
    const points = [];
    let top = 0;
    values.forEach((v, i) => {
      if (v === null || v === undefined) return;
      points.push([i, v]);
      top = Math.max(top, v);
    });
    const n = values.length;
    const xy = ([i, v]) => {
      const x = n > 1 ? (i * W) / (n - 1) : W;
      const y = top > 0 ? H - PAD - (v / top) * (H - 2 * PAD) : H - PAD;
      return x.toFixed(1) + " " + y.toFixed(1);
    };
    let line = svg.querySelector("path.line");
    let dot = svg.querySelector("path.dot");
    let title = svg.querySelector("title");
    if (!line) {
      title = document.createElementNS(SVG, "title");
      line = document.createElementNS(SVG, "path");
      line.setAttribute("class", "line");
      dot = document.createElementNS(SVG, "path");
      dot.setAttribute("class", "dot");
      svg.append(title, line, dot);
    }
    line.setAttribute("d", points.map((p, k) => (k ? "L" : "M") + xy(p)).join(""));
    dot.setAttribute("d", points.length ? "M" + xy(points[points.length - 1]) + "l0 0" : "");
    svg.dataset.points = String(points.length);
    const span = duration(bucketSeconds * n);
    title.textContent = points.length ? `last ${span}, peak ${format(top)}` : `no data in the last ${span}`;
  }

  function renderChoices(models) {
    const sel = $("#chat-model");
    const names = models.filter((m) => m.state !== "crashed" && m.state !== "stopped").map((m) => m.name);
    const have = Array.from(sel.options, (o) => o.value);
    if (have.join("\n") === names.join("\n")) return;
    const keep = sel.value;
    sel.replaceChildren(
      ...names.map((n) => {
        const o = document.createElement("option");
        o.value = n;
        o.textContent = n;
        return o;
      }),
    );
    if (names.includes(keep)) sel.value = keep;
  }

  function renderRefusals(s) {
    const body = $("#refusals tbody");
    const rows = s.refusals.map((r) => {
      const tr = document.createElement("tr");
      for (const [text, cls] of [[clock(r.time)], [r.model || "–"], [r.endpoint], [String(r.status)], [r.code, "code"]]) {
        const td = document.createElement("td");
        td.textContent = text;
        if (cls) td.className = cls;
        tr.append(td);
      }
      return tr;
    });
    const key = s.refusals.map((r) => `${r.time}/${r.code}`).join(",");
    if (body.dataset.key !== key) {
      body.replaceChildren(...rows);
      body.dataset.key = key;
    }
    $("#refusals").hidden = rows.length === 0;
    $("#no-refusals").hidden = rows.length > 0;
    const codes = Object.entries(s.refusal_codes).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
    setText($("#refusal-codes"), codes.map(([c, n]) => `${c} ×${n}`).join(" · "));
  }

  // Chat.

  const history = [];
  let abort = null;

  class ChatError extends Error {}

  function setChat(state, text) {
    const el = $("#chat-status");
    el.dataset.state = state;
    setText(el, text);
  }

  function bubble(role, text) {
    const div = document.createElement("div");
    div.className = "msg " + role;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = role;
    const body = document.createElement("span");
    body.className = "text";
    body.textContent = text;
    div.append(who, body);
    const log = $("#chat-log");
    log.append(div);
    log.scrollTop = log.scrollHeight;
    return body;
  }

  function busy(on) {
    $("#chat-send").disabled = on;
    $("#chat-stop").hidden = !on;
  }

  // lines splits an SSE body into its lines as they arrive.
  async function* lines(body) {
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        yield buf.slice(0, i).replace(/\r$/, "");
        buf = buf.slice(i + 1);
      }
    }
    if (buf) yield buf;
  }

  async function send() {
    if (abort) return;
    const text = $("#chat-input").value.trim();
    const model = $("#chat-model").value;
    if (!text || !model) return;
    $("#chat-input").value = "";
    history.push({ role: "user", content: text });
    bubble("user", text);
    const out = bubble("assistant", "");
    const log = $("#chat-log");
    abort = new AbortController();
    busy(true);
    setChat("streaming", "streaming");
    let tokens = 0, first = 0, answer = "", reasoning = "";
    const start = performance.now();
    const meta = () => {
      setText($("#chat-tokens"), String(tokens));
      setText($("#chat-ttft"), first ? millis(first - start) : "–");
      const secs = (performance.now() - first) / 1000;
      setText($("#chat-rate"), first && tokens > 1 && secs > 0 ? rate((tokens - 1) / secs) : "–");
    };
    meta();
    const body = { model, messages: history.slice(), stream: true, stream_options: { include_usage: true } };
    const max = parseInt($("#chat-max").value, 10);
    if (max > 0) body.max_tokens = max;
    try {
      const r = await fetch("v1/chat/completions", {
        method: "POST",
        headers: headers({ "Content-Type": "application/json" }),
        body: JSON.stringify(body),
        signal: abort.signal,
      });
      if (!r.ok) {
        let msg = "status " + r.status;
        try {
          const e = await r.json();
          if (e.error) msg = `${e.error.code}: ${e.error.message}`;
        } catch (_) {
          // Not an error body: the status says enough.
        }
        if (r.status === 401) askToken("The server refused this token.");
        throw new ChatError(msg);
      }
      let usage = null;
      for await (const line of lines(r.body)) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") break;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new ChatError(`${chunk.error.code}: ${chunk.error.message}`);
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices || []) {
          const d = c.delta || {};
          if (d.content || d.reasoning_content) {
            tokens++;
            if (!first) first = performance.now();
          }
          if (d.reasoning_content) reasoning += d.reasoning_content;
          if (d.content) answer += d.content;
          out.textContent = reasoning ? `(${reasoning.trim()})\n${answer}` : answer;
        }
        log.scrollTop = log.scrollHeight;
        meta();
      }
      if (usage) tokens = usage.completion_tokens;
      meta();
      history.push({ role: "assistant", content: answer });
      setChat("done", "done");
    } catch (e) {
      if (e.name === "AbortError") {
        history.push({ role: "assistant", content: answer });
        setChat("done", "stopped");
      } else {
        history.pop();
        out.parentElement.remove();
        bubble("error", e instanceof ChatError ? e.message : String(e));
        setChat("error", "error");
      }
    } finally {
      abort = null;
      busy(false);
    }
  }

  $("#chat").addEventListener("submit", (ev) => {
    ev.preventDefault();
    send();
  });
  $("#chat-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      send();
    }
  });
  $("#chat-stop").addEventListener("click", () => {
    if (abort) abort.abort();
  });
  $("#chat-clear").addEventListener("click", () => {
    if (abort) return;
    history.length = 0;
    $("#chat-log").replaceChildren();
    setChat("idle", "idle");
  });

  $("#forget").hidden = !token;
  poll();
})();
