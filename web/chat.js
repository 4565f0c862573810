// The chat page: a conversation with a model of the swarm through the OpenAI-compatible API
// (POST /v1/chat/completions, streamed as server-sent events). The whole conversation is sent with each turn.
"use strict";

const $ = id => document.getElementById(id);
const messages = [];      // {role, content} of the finished turns
let controller = null;    // aborts the request in flight (Stop)
let lastUserText = null;  // for Retry

async function loadModels() {
  try {
    const r = await fetch("/v1/models");
    const body = await r.json();
    for (const m of body.data) {
      const o = document.createElement("option");
      o.value = m.id;
      o.textContent = `${m.id} (${m.num_blocks} blocks)`;
      $("model").appendChild(o);
    }
  } catch (e) {
    showError("Cannot list the models: " + e.message);
  }
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  const body = document.createElement("span");
  body.className = "text";
  body.textContent = text;
  div.appendChild(body);
  $("dialogue").appendChild(div);
  div.scrollIntoView({block: "end"});
  return div;
}

function showError(text) {
  $("error-text").textContent = text;
  $("error").hidden = false;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").hidden = !busy;
  $("model").disabled = busy;
}

function number(id) {
  const v = parseFloat($(id).value);
  return Number.isFinite(v) ? v : undefined;
}

// A person-readable reason for a failed request.
function explain(status, message) {
  if (status === 429) return "The API is at capacity (too many conversations at once): " + message;
  if (status === 503 && /out of capacity/.test(message)) return "The swarm is out of capacity: " + message;
  if (status === 503) return "The swarm cannot serve this model now: " + message;
  return message || `HTTP ${status}`;
}

async function send(userText) {
  $("error").hidden = true;
  lastUserText = userText;
  addMessage("user", userText);
  const convo = [];
  const system = $("system").value.trim();
  if (system) convo.push({role: "system", content: system});
  convo.push(...messages, {role: "user", content: userText});
  const reply = addMessage("assistant", "");
  reply.classList.add("streaming");
  const text = reply.querySelector(".text");
  setBusy(true);
  controller = new AbortController();
  const started = performance.now();
  let firstAt = null, chunks = 0, usage = null, finish = null, failed = null;
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      signal: controller.signal,
      body: JSON.stringify({
        model: $("model").value, messages: convo, stream: true, stream_options: {include_usage: true},
        temperature: number("temperature"), top_p: number("top_p"), top_k: number("top_k"),
        repetition_penalty: number("repetition_penalty"), max_tokens: number("max_tokens"),
      }),
    });
    if (!r.ok) {
      let message = "";
      try { message = (await r.json()).error.message; } catch (_) {}
      throw {status: r.status, message};
    }
    const reader = r.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.error) throw {status: 0, message: chunk.error.message};
          if (chunk.usage) usage = chunk.usage;
          const choice = chunk.choices && chunk.choices[0];
          if (!choice) continue;
          if (choice.finish_reason) finish = choice.finish_reason;
          const piece = choice.delta && choice.delta.content;
          if (piece) {
            if (firstAt === null) firstAt = performance.now();
            chunks++;
            text.textContent += piece;
            reply.scrollIntoView({block: "end"});
            const secs = (performance.now() - firstAt) / 1000;
            if (chunks > 1 && secs > 0) $("speed").textContent = `${((chunks - 1) / secs).toFixed(1)} tokens/s`;
          }
        }
      }
    }
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else failed = e.status !== undefined ? explain(e.status, e.message) : "Connection failed: " + e.message;
  }
  reply.classList.remove("streaming");
  setBusy(false);
  controller = null;
  if (failed) {
    reply.remove();
    showError(failed);
    return;
  }
  messages.push({role: "user", content: userText}, {role: "assistant", content: text.textContent});
  const meta = document.createElement("span");
  meta.className = "meta";
  const secs = ((performance.now() - started) / 1000).toFixed(1);
  const tokens = usage ? usage.completion_tokens : chunks;
  const rate = firstAt && tokens > 1 ? `, ${((tokens - 1) / ((performance.now() - firstAt) / 1000)).toFixed(1)} tokens/s` : "";
  meta.textContent = `${tokens} tokens in ${secs} s${rate}` + (finish === "length" ? " (max new tokens reached)" :
                     finish === "stopped" ? " (stopped)" : "");
  reply.appendChild(meta);
  $("speed").textContent = "";
}

$("composer").addEventListener("submit", e => {
  e.preventDefault();
  const t = $("input").value.trim();
  if (!t || controller) return;
  $("input").value = "";
  send(t);
});
$("input").addEventListener("keydown", e => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("retry").addEventListener("click", () => {
  if (!lastUserText || controller) return;
  const users = document.querySelectorAll(".msg.user");
  if (users.length) users[users.length - 1].remove();
  send(lastUserText);
});
$("clear").addEventListener("click", () => {
  if (controller) controller.abort();
  messages.length = 0;
  $("dialogue").innerHTML = "";
  $("error").hidden = true;
});
$("model").addEventListener("change", () => $("clear").click());
loadModels();
$("input").focus();
