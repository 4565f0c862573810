// The swarm health page: polls /api/v1/state (what the DHT says each server hosts) and draws, per model, the
// span of every server over the blocks and how many online servers cover each block.
"use strict";

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  for (const c of children) e.append(c);
  return e;
}

function renderModel(m) {
  const box = el("section", {class: "model"});
  const status = m.healthy ? el("span", {class: "badge healthy"}, "healthy")
                           : el("span", {class: "badge broken"}, "no server for blocks " + m.missing_blocks.join(", "));
  box.append(el("h2", {}, `${m.name} `, status));
  box.append(el("div", {class: "status"}, `swarm id ${m.swarm_id} · ${m.num_blocks} blocks · ${m.servers.length} servers`));
  const n = m.num_blocks;
  const map = el("div", {class: "map"});
  map.style.gridTemplateColumns = `minmax(8em, 14em) repeat(${n}, 1fr)`;
  map.append(el("div", {class: "name"}, "block"));
  for (let b = 0; b < n; b++) map.append(el("div", {class: "blocknum"}, b % 5 === 0 ? String(b) : ""));
  map.append(el("div", {class: "name"}, "coverage"));
  for (let b = 0; b < n; b++) {
    const c = m.coverage[b];
    map.append(el("div", {class: "cell cov" + Math.min(c, 3), title: `block ${b}: ${c} online server(s)`}));
  }
  const servers = [...m.servers].sort((a, b) => a.first_block - b.first_block);
  for (const s of servers) {
    map.append(el("div", {class: "name", title: s.address}, s.public_name || s.address));
    for (let b = 0; b < n; b++) {
      const inside = b >= s.first_block && b < s.last_block;
      map.append(el("div", {class: "cell" + (inside ? " " + s.state : ""),
                            title: inside ? `${s.public_name || s.address}: blocks ${s.first_block}:${s.last_block}, ${s.state}` : ""}));
    }
  }
  box.append(map);
  const table = el("table");
  table.append(el("tr", {}, ...["server", "address", "blocks", "state", "throughput (rps)", "cache left (tokens)",
                                "sessions", "version", "dtype · KV · device", "this API's view"].map(h => el("th", {}, h))));
  for (const s of servers) {
    table.append(el("tr", {},
      el("td", {}, s.public_name || "—"), el("td", {}, s.address), el("td", {}, `${s.first_block}:${s.last_block}`),
      el("td", {}, el("span", {class: "badge " + s.state}, s.state)), el("td", {}, s.throughput.toFixed(1)),
      el("td", {}, String(s.cache_tokens_left)), el("td", {}, String(s.sessions)), el("td", {}, s.version),
      el("td", {}, `${s.dtype} · ${s.kv_dtype} · ${s.device}`), el("td", {title: s.client_view ? s.client_view.last_failure : ""}, view(s))));
  }
  box.append(table);
  return box;
}

// What the API's own client knows of a server: unused, fine, or banned (and why: a spot check's wrong output, a
// failure).
function view(s) {
  const v = s.client_view;
  if (!v) return "not used";
  if (v.banned) return "banned: " + (v.last_failure || "failed " + v.failures + " times");
  return `${v.successes} ok, ${v.failures} failed`;
}

async function refresh() {
  try {
    const r = await fetch("/api/v1/state");
    const state = await r.json();
    const models = document.getElementById("models");
    models.replaceChildren(...state.models.map(renderModel));
    const api = state.api;
    document.getElementById("summary").textContent =
      `API ${api.version}: ${api.sessions} of ${api.max_sessions} sessions open, up ${Math.round(api.uptime_s)} s` +
      (state.dht_error ? ` — DHT: ${state.dht_error}` : "") + ` · updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    document.getElementById("summary").textContent = "Cannot read the swarm's state: " + e.message;
  }
}

refresh();
setInterval(refresh, 5000);
