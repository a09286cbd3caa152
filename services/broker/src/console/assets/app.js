// glovebox console: an approver client of the broker's WebSocket protocol (the same frames as
// `glovebox approve`), plus the `manage` frames for the account's own policy, calls and jobs.
//
// Everything an agent controls (paths, commands, diffs, job output) is shown as text, never as
// markup: this file builds the page with createElement and textContent only (the page's CSP also
// requires Trusted Types, so an HTML sink would throw). Answers cannot be given to an ask the
// person has not had in front of them for ARM_MS: buttons stay disabled and keys do nothing until
// then, and the wait starts again whenever the tab or the Approvals panel comes back into view.
"use strict";

(() => {
  const ARM_MS = 1000;           // an ask must be on screen this long before it can be answered
  const SANDBOX_ARM_MS = 5000;   // the sandbox's off switch stays armed this long
  const SECOND_CLICK_MIN_MS = 300; // a double click is not two decisions
  const PROVIDERS_POLL_MS = 2000; // the providers list is read again this often while shown
  const PACKS_RELIST_TRIES = 10;   // a listing with a pack starting or waiting for trust is read
  const PACKS_RELIST_MS = 3000;    // again this often, this many times, while the panel is shown
  const $ = (id) => document.getElementById(id);

  // ---- DOM helpers: text only ------------------------------------------------------------
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v);
    }
    for (const c of children) {
      if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
    }
    return node;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function show(node, visible) { node.hidden = !visible; }
  let toastTimer = 0;
  function toast(message) {
    const t = $("toast");
    t.textContent = message;
    t.classList.add("visible");
    clearTimeout(toastTimer);
    toastTimer = setTimeout(() => t.classList.remove("visible"), 6000);
  }

  // ---- the connection ----------------------------------------------------------------------
  let ws = null;
  let account = "";
  let nextRequest = 1;
  const pending = new Map();
  let retry = 0;

  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(`${scheme}//${location.host}/console/ws`);
    ws.addEventListener("open", () => {
      ws.send(JSON.stringify({ type: "hello", role: "approver" }));
    });
    ws.addEventListener("message", (e) => {
      let frame;
      try { frame = JSON.parse(e.data); } catch { return; }
      onFrame(frame);
    });
    ws.addEventListener("close", (e) => {
      for (const [, p] of pending) p.reject(new Error("disconnected"));
      pending.clear();
      dropAsk();
      const banner = $("conn-banner");
      if (e.code === 1008 || retry >= 5) {
        banner.textContent = "Signed out: this session ended. Run `glovebox console` for a new login link.";
        show(banner, true);
        document.body.classList.add("ended");
        return;
      }
      banner.textContent = "Disconnected from glovebox; reconnecting…";
      show(banner, true);
      retry += 1;
      setTimeout(connect, 1000 * retry);
    });
  }

  function send(frame) {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(frame));
  }

  // One `manage` operation on the account; resolves with its result, rejects with its error.
  function manage(op) {
    return new Promise((resolve, reject) => {
      if (!ws || ws.readyState !== WebSocket.OPEN) { reject(new Error("not connected")); return; }
      const request_id = `r${nextRequest++}`;
      pending.set(request_id, { resolve, reject });
      ws.send(JSON.stringify({ type: "manage", request_id, op }));
    });
  }

  function onFrame(f) {
    switch (f.type) {
      case "hello_ok":
        retry = 0;
        account = f.account;
        show($("conn-banner"), false);
        $("who").textContent = `account ${f.account}`;
        $("audit-checkpoint").textContent = f.audit_checkpoint
          ? `audit checkpoint: ${f.audit_checkpoint}` : "";
        refreshOverview();
        refreshPanel();
        break;
      case "ask": showAsk(f); break;
      case "ask_closed":
        if (current && current.ask_id === f.ask_id) {
          const why = { timeout: "timed out (denied)", withdrawn: "was withdrawn by the agent",
            answered: "was answered elsewhere", closed: "closed" }[f.reason] || f.reason;
          dropAsk();
          toast(`The ask ${why}.`);
        }
        break;
      case "activity":
        setActive(f.active);
        if (!f.active) refreshPanel({ idle: true });
        break;
      case "audit_health":
        $("audit-banner").textContent = f.healthy ? "" : `The audit is failing: ${f.message}`;
        show($("audit-banner"), !f.healthy);
        if (f.healthy) toast("The audit is written again: calls run again.");
        break;
      case "enabled":
        overview.enabled = f.enabled;
        renderOverview();
        toast(`Agents' tools are now ${f.enabled ? "on" : "off"}.`);
        break;
      case "manage_result": {
        const p = pending.get(f.request_id);
        if (!p) break;
        pending.delete(f.request_id);
        if (f.ok) p.resolve(f.result);
        else p.reject(new Error(f.error ? f.error.message : "refused"));
        break;
      }
      case "error":
        toast(`glovebox: ${f.message}`);
        if (current && /no pending ask/.test(f.message)) dropAsk();
        break;
      default: break;
    }
  }

  // ---- approvals -----------------------------------------------------------------------------
  let current = null;     // the ask on screen
  let seenSince = 0;      // when it was last put in front of the person (performance.now())
  let armTimer = 0;
  let tick = 0;

  function showAsk(f) {
    // preview_cut: allowing takes the same answer twice; confirming: the first one, given.
    current = { ask_id: f.ask_id, deadline: performance.now() + f.expires_in_ms,
      preview_cut: Boolean(f.preview_cut), confirming: null };
    const d = f.display || { tool: f.tool, subjects: f.subjects, preview: f.preview };
    const exec = d.subjects.find((s) => s.domain === "exec");
    const verbs = { write: "write", delete: "delete", read: "read", exec: "run a command", tool: "use a tool", job: "act on a job" };
    const first = exec || d.subjects[0];
    $("ask-title").textContent = first
      ? `An agent wants to ${verbs[first.domain] || first.domain}`
      : "An agent asks for approval";
    $("ask-tool").textContent = d.tool;
    $("ask-account").textContent = f.account;
    $("ask-connection").textContent = f.connection_id;
    $("ask-call").textContent = f.call_id;
    $("ask-id").textContent = shortId(f.ask_id);
    const warning = $("ask-warning");
    warning.textContent = f.warning ? `Warning: ${f.warning}` : "";
    show(warning, Boolean(f.warning));
    show($("ask-exec"), Boolean(exec));
    if (exec) {
      $("ask-command").textContent = exec.path;
      const cwd = d.subjects.find((s) => s.domain === "read");
      $("ask-cwd").textContent = cwd ? cwd.path : "the workdir";
    }
    const list = $("ask-subjects");
    clear(list);
    const others = d.subjects.filter((s) => !exec || (s.domain !== "exec" && s.domain !== "read"));
    for (const s of others) {
      list.append(el("li", {}, el("span", { class: `domain ${s.domain}`, text: s.domain }), " ", el("code", { text: s.path })));
    }
    show($("ask-paths"), others.length > 0);
    renderPreview(d.preview);
    show($("no-ask"), false);
    show($("ask"), true);
    $("ask-count").textContent = "1";
    show($("ask-count"), true);
    document.title = "(1) glovebox console";
    seen();
    countdown();
    clearInterval(tick);
    tick = setInterval(countdown, 250);
    if (activePanel !== "approvals") selectPanel("approvals");
    $("ask").focus();
    notify(d, first);
  }

  // A unified diff, one line per row, coloured by what the line does; anything else as is.
  function renderPreview(text) {
    const pre = $("ask-preview");
    clear(pre);
    const isDiff = /^(--- |\+\+\+ |@@ )/m.test(text);
    for (const line of text.split("\n")) {
      let cls = "ctx";
      if (isDiff) {
        if (line.startsWith("+++") || line.startsWith("---")) cls = "meta";
        else if (line.startsWith("@@")) cls = "hunk";
        else if (line.startsWith("+")) cls = "add";
        else if (line.startsWith("-")) cls = "del";
      }
      pre.append(el("span", { class: `line ${cls}`, text: line }), "\n");
    }
    previewIsDiff = isDiff;
    renderSideBySide(isDiff ? sideBySide(text) : []);
    show($("ask-preview-title"), text.length > 0);
    show($("diff-layout"), isDiff);
    layoutPreview(text.length > 0);
  }

  // A unified diff as rows for a side-by-side view (pure): `meta` and `hunk` rows span both
  // sides; `same` and `change` rows have an `old` and/or a `new` line ({no, text}). Removed and
  // added lines in a run are paired in order. Line counts come from each hunk's header, so a
  // removed line that starts with "--" is still a removed line.
  function sideBySide(text) {
    const rows = [];
    let oldNo = 0, newNo = 0, oldLeft = 0, newLeft = 0;
    let dels = [], adds = [];
    const flush = () => {
      for (let i = 0; i < Math.max(dels.length, adds.length); i++) {
        rows.push({ kind: "change", old: dels[i], new: adds[i] });
      }
      dels = []; adds = [];
    };
    for (const line of text.split("\n")) {
      const inHunk = oldLeft > 0 || newLeft > 0;
      const h = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@/.exec(line);
      if (!inHunk && h) {
        flush();
        oldNo = Number(h[1]); oldLeft = h[2] === undefined ? 1 : Number(h[2]);
        newNo = Number(h[3]); newLeft = h[4] === undefined ? 1 : Number(h[4]);
        rows.push({ kind: "hunk", text: line });
      } else if (inHunk && line.startsWith("-") && oldLeft > 0) {
        dels.push({ no: oldNo++, text: line.slice(1) }); oldLeft--;
      } else if (inHunk && line.startsWith("+") && newLeft > 0) {
        adds.push({ no: newNo++, text: line.slice(1) }); newLeft--;
      } else if (inHunk && line.startsWith(" ") && oldLeft > 0 && newLeft > 0) {
        flush();
        rows.push({ kind: "same", old: { no: oldNo++, text: line.slice(1) }, new: { no: newNo++, text: line.slice(1) } });
        oldLeft--; newLeft--;
      } else {
        flush();
        if (line.length) rows.push({ kind: "meta", text: line });
      }
    }
    flush();
    return rows;
  }

  function renderSideBySide(rows) {
    const body = $("ask-sxs").tBodies[0];
    clear(body);
    const side = (line, cls) => line
      ? [el("td", { class: "no", text: String(line.no) }), el("td", { class: `text ${cls}`, text: line.text })]
      : [el("td", { class: "no" }), el("td", { class: "text none" })];
    for (const r of rows) {
      if (r.kind === "meta" || r.kind === "hunk") {
        body.append(el("tr", { class: r.kind }, el("td", { colspan: "4", text: r.text })));
      } else {
        const changed = r.kind === "change";
        body.append(el("tr", { class: r.kind }, ...side(r.old, changed ? "del" : "ctx"), ...side(r.new, changed ? "add" : "ctx")));
      }
    }
  }

  // Unified or side by side, as the person last chose (kept in this browser).
  const LAYOUT_KEY = "glovebox.diffLayout";
  let previewIsDiff = false;
  function sideBySideChosen() {
    try { return localStorage.getItem(LAYOUT_KEY) === "side-by-side"; } catch { return false; }
  }
  function layoutPreview(any) {
    const sxs = previewIsDiff && sideBySideChosen();
    show($("ask-preview"), any && !sxs);
    show($("ask-sxs-wrap"), any && sxs);
    const b = $("diff-layout");
    b.setAttribute("aria-pressed", sxs ? "true" : "false");
    b.textContent = sxs ? "Show as one column" : "Show side by side";
  }
  $("diff-layout").addEventListener("click", () => {
    try { localStorage.setItem(LAYOUT_KEY, sideBySideChosen() ? "unified" : "side-by-side"); } catch { /* not kept */ }
    layoutPreview(true);
  });

  // The ask has just been put in front of the person: answers wait ARM_MS from now.
  function seen() {
    seenSince = performance.now();
    setArmed(false);
    clearTimeout(armTimer);
    armTimer = setTimeout(() => {
      if (current && !document.hidden && activePanel === "approvals") setArmed(true);
    }, ARM_MS);
  }

  // Whether the ask on screen may be answered: the tab shown, the Approvals panel shown, and the
  // ask in front of the person for ARM_MS since either last came into view.
  function armed() {
    return Boolean(current) && !document.hidden && activePanel === "approvals" &&
      performance.now() - seenSince >= ARM_MS;
  }

  function setArmed(on) {
    for (const id of ["answer-once", "answer-always", "answer-deny"]) $(id).disabled = !on;
    const confirming = current && current.confirming;
    $("ask-arming").textContent = !on
      ? "Read the request first: answers are possible in a moment."
      : confirming
        ? `The preview was cut: not all of what this allows is shown. ${confirming === "always"
          ? "Always allow (A)" : "Allow once (Y)"} again to allow it anyway, or Deny (N).`
        : "Answer with the buttons or the keys Y, A and N.";
  }

  // The ask's id as the person sees it: its first four hex digits (`ask-3f2a…` → `3f2a`).
  function shortId(askId) {
    return askId.replace(/^ask-/, "").slice(0, 4);
  }

  function countdown() {
    if (!current) return;
    const left = Math.max(0, Math.ceil((current.deadline - performance.now()) / 1000));
    $("ask-countdown").textContent = left > 0
      ? `${left} s left; unanswered asks are denied.`
      : "Time is up: the ask is denied.";
    $("ask-countdown").classList.toggle("urgent", left <= 5);
  }

  function dropAsk() {
    current = null;
    clearInterval(tick);
    clearTimeout(armTimer);
    setArmed(false);
    show($("ask"), false);
    show($("no-ask"), true);
    show($("ask-count"), false);
    document.title = "glovebox console";
  }

  function answer(decision) {
    if (!armed()) {
      $("ask-arming").textContent = "Not yet: read the request first.";
      return;
    }
    if (current.preview_cut && decision !== "deny" && current.confirming !== decision) {
      // A cut preview: the same answer again, read and armed anew.
      current.confirming = decision;
      seen();
      return;
    }
    const confirm_cut = current.confirming === decision;
    send({ type: "answer", ask_id: current.ask_id, decision, confirm_cut });
    const word = { once: "allowed once", always: "always allowed (a rule was added)", deny: "denied" }[decision];
    const id = shortId(current.ask_id);
    dropAsk();
    toast(`Ask ${id} answered: ${word}.`);
  }

  $("answer-once").addEventListener("click", () => answer("once"));
  $("answer-always").addEventListener("click", () => answer("always"));
  $("answer-deny").addEventListener("click", () => answer("deny"));

  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const t = e.target;
    if (t && (t.tagName === "INPUT" || t.tagName === "SELECT" || t.tagName === "TEXTAREA")) return;
    const decision = { y: "once", a: "always", n: "deny" }[e.key.toLowerCase()];
    if (!decision || !current) return;
    e.preventDefault();
    if (e.repeat) return; // a key held down since before the ask is not an answer
    answer(decision);
  });

  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && current) seen();
  });

  // Desktop notifications while the tab is hidden (asked for on a click, as browsers require).
  function notifyState() {
    const s = !("Notification" in window) ? "not supported by this browser"
      : Notification.permission === "granted" ? "on"
      : Notification.permission === "denied" ? "blocked in the browser's settings" : "off";
    $("notify-state").textContent = `Notifications: ${s}.`;
    show($("notify-enable"), "Notification" in window && Notification.permission === "default");
  }
  $("notify-enable").addEventListener("click", async () => {
    try { await Notification.requestPermission(); } catch { /* unsupported */ }
    notifyState();
  });
  function notify(d, first) {
    if (!document.hidden || !("Notification" in window) || Notification.permission !== "granted") return;
    const n = new Notification("glovebox: a call waits for your approval", {
      body: `${d.tool}${first ? ` ${first.domain} ${first.path}` : ""}`.slice(0, 200),
      tag: "glovebox-ask",
      requireInteraction: true,
    });
    n.addEventListener("click", () => { window.focus(); n.close(); });
  }

  // ---- panels --------------------------------------------------------------------------------
  let activePanel = "approvals";
  function selectPanel(name) {
    activePanel = name;
    for (const b of document.querySelectorAll("nav button[data-panel]")) {
      const on = b.dataset.panel === name;
      if (on) b.setAttribute("aria-current", "page"); else b.removeAttribute("aria-current");
      show($(`panel-${b.dataset.panel}`), on);
    }
    // An ask answers only while it is in view: leaving Approvals disarms it, and coming back
    // starts its wait again (a click or key meant for another panel never answers it).
    if (current) {
      if (name === "approvals") seen(); else { clearTimeout(armTimer); setArmed(false); }
    }
    refreshPanel();
  }
  for (const b of document.querySelectorAll("nav button[data-panel]")) {
    b.addEventListener("click", () => selectPanel(b.dataset.panel));
  }
  function refreshPanel(why) {
    if (activePanel === "activity") refreshCalls();
    if (activePanel === "rules") refreshRules();
    if (activePanel === "account") { refreshOverview(); refreshJobs(); }
    if (activePanel === "packs") {
      refreshProviders();
      refreshSecrets();
      // Listing starts packs: only when the panel is opened or on request, not on every idle.
      if (!(why && why.idle)) refreshPacks(0);
    }
  }

  // ---- overview, switches -------------------------------------------------------------------
  const overview = { enabled: true, sandbox_enabled: true, confined: false };
  let active = false;

  // Reads run side by side at the broker and may answer out of order: only the latest one asked
  // is shown, so a read sent before a switch cannot undo what the switch showed.
  let overviewAsked = 0;
  async function refreshOverview() {
    const mine = ++overviewAsked;
    try {
      const read = await manage({ name: "overview" });
      if (mine !== overviewAsked) return;
      Object.assign(overview, read);
      setActive(overview.active);
      renderOverview();
    } catch (e) { toast(`Could not read the account: ${e.message}`); }
  }

  function setActive(on) {
    active = on;
    const text = on ? "An agent is working." : "No call in flight.";
    $("activity-state").textContent = text;
    renderStatus();
  }

  function renderStatus() {
    const parts = [overview.enabled ? "tools on" : "tools OFF", active ? "agent working" : "idle"];
    $("status").textContent = parts.join(" · ");
  }

  function renderOverview() {
    renderStatus();
    show($("sandbox-banner"), !overview.sandbox_enabled);
    document.body.classList.toggle("sandbox-off", !overview.sandbox_enabled);
    $("fact-workdir").textContent = overview.workdir || "";
    $("fact-boundary").textContent = overview.executor_sandbox || "";
    $("fact-approvers").textContent = String(overview.approvers ?? "");
    $("fact-jobs").textContent = String(overview.running_jobs ?? "");
    $("tools-state").textContent = overview.enabled
      ? "On: agents see the tools, and each call is judged by the policy."
      : "Off: agents see no tools, and every call is refused.";
    $("tools-toggle").textContent = overview.enabled ? "Switch tools off" : "Switch tools on";
    $("confine-state").textContent = overview.confined
      ? "On: outside the workdir, what would ask is denied."
      : "Off: outside the workdir, calls ask like anywhere else.";
    $("confine-toggle").textContent = overview.confined ? "Stop confining" : "Confine to the workdir";
    if (!sandboxArmed) renderSandbox();
    renderProviders(overview.providers || []);
  }

  $("tools-toggle").addEventListener("click", () => send({ type: "set_enabled", enabled: !overview.enabled }));

  $("confine-toggle").addEventListener("click", async () => {
    try {
      await manage({ name: "set_confinement", enabled: !overview.confined });
      await refreshOverview();
    } catch (e) { toast(`Confinement: ${e.message}`); }
  });

  // The sandbox's off switch: the first click arms it for SANDBOX_ARM_MS, a second click in that
  // time (not a double click) turns the sandbox off; it disarms by itself. On is one click.
  let sandboxArmed = false;
  let armedAt = 0;
  let disarmTimer = 0;
  let armTick = 0;
  function renderSandbox() {
    const b = $("sandbox-toggle");
    b.classList.toggle("armed", sandboxArmed);
    b.setAttribute("aria-pressed", sandboxArmed ? "true" : "false");
    if (sandboxArmed) {
      const left = Math.max(0, Math.ceil((armedAt + SANDBOX_ARM_MS - performance.now()) / 1000));
      b.textContent = "Click again to turn the sandbox OFF";
      $("sandbox-arm").textContent = `Armed: a second click within ${left} s turns the sandbox off. It disarms by itself.`;
    } else {
      b.textContent = overview.sandbox_enabled ? "Turn the sandbox off…" : "Turn the sandbox on";
      $("sandbox-arm").textContent = "";
    }
    $("sandbox-state").textContent = overview.sandbox_enabled
      ? "On: every call is judged by the rules and the secret floor."
      : "OFF: every call is allowed, the secret floor included (managed denies still apply).";
  }
  function disarm() {
    sandboxArmed = false;
    clearTimeout(disarmTimer);
    clearInterval(armTick);
    renderSandbox();
  }
  $("sandbox-toggle").addEventListener("click", async () => {
    if (!overview.sandbox_enabled) {
      try {
        await manage({ name: "set_sandbox", enabled: true });
        await refreshOverview();
        toast("The sandbox is on again.");
      } catch (e) { toast(`Sandbox: ${e.message}`); }
      return;
    }
    const since = performance.now() - armedAt;
    if (!sandboxArmed) {
      sandboxArmed = true;
      armedAt = performance.now();
      disarmTimer = setTimeout(disarm, SANDBOX_ARM_MS);
      armTick = setInterval(renderSandbox, 250);
      renderSandbox();
      return;
    }
    if (since < SECOND_CLICK_MIN_MS) return;
    disarm();
    try {
      await manage({ name: "set_sandbox", enabled: false, confirm: true });
      await refreshOverview();
      toast("The sandbox is OFF.");
    } catch (e) { toast(`Sandbox: ${e.message}`); }
  });

  // ---- activity ------------------------------------------------------------------------------
  let calls = [];
  async function refreshCalls() {
    try {
      calls = (await manage({ name: "recent_calls", limit: 100 })).calls;
      renderCalls();
    } catch (e) { toast(`Could not read the audit: ${e.message}`); }
  }
  function renderCalls() {
    const q = $("calls-filter").value.trim().toLowerCase();
    const body = $("calls").tBodies[0];
    clear(body);
    const shown = calls.filter((c) => !q || [c.tool, c.subject, c.verdict, c.approval, c.outcome, c.error_code, c.client_call_id]
      .some((v) => (v || "").toLowerCase().includes(q)));
    for (const c of shown) {
      const outcome = c.outcome + (c.error_code ? ` (${c.error_code})` : "");
      body.append(el("tr", { class: `outcome-${c.outcome}` },
        el("td", {}, el("time", { datetime: c.started_at, text: c.started_at.replace("T", " ").replace(/\.\d+Z$/, "Z") })),
        el("td", {}, el("code", { text: c.tool })),
        el("td", { class: "subject" }, el("code", { text: c.subject })),
        el("td", { class: `verdict ${c.verdict}`, text: c.verdict }),
        el("td", { text: c.approval }),
        el("td", { text: outcome }),
        el("td", {}, el("button", { type: "button", text: "Detail", "aria-label": `Detail of call ${c.client_call_id || c.call_id}`, onclick: () => showCall(c) }))));
    }
    if (!shown.length) body.append(el("tr", {}, el("td", { colspan: "7", class: "quiet", text: calls.length ? "No call matches the filter." : "No call yet." })));
  }
  $("calls-filter").addEventListener("input", renderCalls);
  $("calls-refresh").addEventListener("click", refreshCalls);

  async function showCall(c) {
    try {
      const detail = await manage({ name: "call_detail", call_id: c.call_id });
      $("h-call-detail").textContent = `Call ${c.client_call_id || c.call_id}: ${c.tool}`;
      const body = $("call-events").tBodies[0];
      clear(body);
      for (const e of detail.events) {
        const judged = [e.verdict, e.approval].filter(Boolean).join(" / ");
        const why = [e.rule, e.reason, e.detail, e.bytes ? `${e.bytes} bytes` : ""].filter(Boolean).join(" — ");
        body.append(el("tr", {},
          el("td", { text: e.ts }), el("td", { text: e.source }), el("td", { text: e.kind }),
          el("td", { class: "subject" }, el("code", { text: e.subject })),
          el("td", { text: judged }), el("td", { text: e.outcome + (e.error_code ? ` (${e.error_code})` : "") }),
          el("td", { text: why })));
      }
      show($("call-detail"), true);
      $("call-detail").focus();
    } catch (e) { toast(`Could not read the call: ${e.message}`); }
  }
  $("call-detail-close").addEventListener("click", () => show($("call-detail"), false));

  // ---- rules ---------------------------------------------------------------------------------
  async function refreshRules() {
    let r;
    try { r = await manage({ name: "list_rules" }); } catch (e) { toast(`Could not list the rules: ${e.message}`); return; }
    overview.sandbox_enabled = r.sandbox_enabled;
    overview.confined = r.confined;
    renderOverview();
    const err = $("rules-error");
    err.textContent = r.error ? `The policy file does not load (the last good one decides): ${r.error}` : "";
    show(err, Boolean(r.error));
    const warnings = $("rules-warnings");
    clear(warnings);
    for (const w of [...r.caps.map((c) => `capped by the administrator: ${c}`), ...r.warnings]) warnings.append(el("li", { class: "warning", text: w }));
    const body = $("rules").tBodies[0];
    clear(body);
    const floor = $("floor");
    clear(floor);
    for (const rule of r.rules) {
      if (rule.layer === "floor") { floor.append(el("li", {}, el("code", { text: rule.pattern }))); continue; }
      const expires = rule.expires ? rule.expires + (rule.expired ? " (expired)" : "") : "never";
      const action = rule.read_only
        ? el("span", { class: "quiet", text: "read-only" })
        : el("button", { type: "button", class: "revoke", text: "Revoke",
          "aria-label": `Revoke ${rule.section} ${rule.kind} ${rule.pattern}`,
          onclick: () => revoke(rule) });
      body.append(el("tr", { class: `layer-${rule.layer}${rule.expired ? " expired" : ""}` },
        el("td", { text: rule.layer }), el("td", { text: rule.section }),
        el("td", { class: `kind ${rule.kind}`, text: rule.kind }),
        el("td", {}, el("code", { class: "pattern", text: rule.pattern })),
        el("td", { text: expires }), el("td", {}, action)));
    }
    if (!body.rows.length) body.append(el("tr", {}, el("td", { colspan: "6", class: "quiet", text: "No rules: every call asks." })));
  }

  async function revoke(rule) {
    try {
      const r = await manage({ name: "revoke_rule", section: rule.section, kind: rule.kind, pattern: rule.pattern });
      toast(r.changed ? `Revoked: ${r.summary}` : "That rule was already gone.");
    } catch (e) { toast(`Revoke: ${e.message}`); }
    refreshRules();
  }

  // What the policy decides today for the pattern typed, as `glovebox policy explain` would say.
  const explainDomain = { "paths.read": "read", "paths.write": "write", delete: "delete", commands: "exec", tools: "tool" };
  let explainTimer = 0;
  let explainSeq = 0;
  function previewRule() {
    clearTimeout(explainTimer);
    explainTimer = setTimeout(async () => {
      const subject = $("rule-pattern").value;
      const out = $("rule-preview");
      if (!subject) { out.textContent = ""; return; }
      const seq = ++explainSeq;
      const domain = explainDomain[$("rule-section").value];
      try {
        const r = await manage({ name: "explain", domain, subject });
        if (seq !== explainSeq) return;
        out.textContent = `Today, ${domain} ${r.subject}: ${r.verdict.toUpperCase()} (${r.layer}: ${r.rule}; ${r.reason})`;
        out.className = `preview-line verdict ${r.verdict}`;
      } catch (e) {
        if (seq !== explainSeq) return;
        out.textContent = `Today: cannot explain this subject (${e.message})`;
        out.className = "preview-line";
      }
    }, 250);
  }
  $("rule-pattern").addEventListener("input", previewRule);
  $("rule-section").addEventListener("change", previewRule);

  $("add-rule").addEventListener("submit", async (e) => {
    e.preventDefault();
    const op = {
      name: "add_rule",
      section: $("rule-section").value,
      kind: $("rule-kind").value,
      pattern: $("rule-pattern").value,
      exact: $("rule-exact").checked,
    };
    const expires = $("rule-expires").value.trim();
    if (expires) op.expires = expires;
    try {
      const r = await manage(op);
      $("rule-result").textContent = r.changed ? `Added: ${r.summary}` : "Unchanged: the rule is already there.";
      $("rule-pattern").value = "";
      $("rule-preview").textContent = "";
    } catch (err) {
      $("rule-result").textContent = `Refused: ${err.message}`;
    }
    refreshRules();
  });

  // ---- jobs ----------------------------------------------------------------------------------
  let lastJobs = null;
  async function refreshJobs() {
    const body = $("jobs").tBodies[0];
    let r;
    try { r = await manage({ name: "jobs" }); } catch (e) {
      lastJobs = null;
      clear(body);
      body.append(el("tr", {}, el("td", { colspan: "4", class: "quiet", text: `Jobs cannot be listed: ${e.message}` })));
      return;
    }
    // Unchanged jobs keep their rows: a table rebuilt under the pointer (the panel refreshes
    // whenever the agent goes idle) would swallow a click that was half done.
    const shown = JSON.stringify((r.jobs || []).map((j) => [j.job_id, j.command, j.state, j.exit_code]));
    if (shown === lastJobs && body.rows.length) return;
    lastJobs = shown;
    clear(body);
    for (const j of r.jobs || []) {
      const state = j.state + (j.exit_code !== undefined ? ` (exit ${j.exit_code})` : "");
      const actions = el("td", {},
        el("button", { type: "button", text: "Tail", "aria-label": `Output of job ${j.job_id}`, onclick: () => tail(j.job_id) }));
      if (j.state === "running") {
        actions.append(" ", el("button", { type: "button", class: "deny", text: "Kill", "aria-label": `Kill job ${j.job_id}`, onclick: () => kill(j.job_id) }));
      }
      body.append(el("tr", {}, el("td", {}, el("code", { text: j.job_id })),
        el("td", {}, el("code", { text: j.command })), el("td", { text: state }), actions));
    }
    if (!body.rows.length) body.append(el("tr", {}, el("td", { colspan: "4", class: "quiet", text: "No jobs." })));
  }
  async function tail(jobId) {
    try {
      const r = await manage({ name: "job_tail", job_id: jobId });
      const out = [r.stdout && r.stdout.text, r.stderr && r.stderr.text ? `--- stderr ---\n${r.stderr.text}` : ""].filter(Boolean).join("\n");
      $("h-job-output").textContent = `Output of ${jobId} (${r.state})`;
      $("job-tail").textContent = out || "(no output)";
      show($("job-output"), true);
    } catch (e) { toast(`Tail: ${e.message}`); }
  }
  // A killed job takes a moment to end (its shim stops every process first): the table is
  // refreshed until it no longer shows the job running, for a few seconds at most.
  async function kill(jobId) {
    try { await manage({ name: "job_kill", job_id: jobId }); toast(`Job ${jobId} stopped.`); } catch (e) { toast(`Kill: ${e.message}`); }
    for (let i = 0; i < 20; i++) {
      await refreshJobs();
      if (!document.querySelector(`[aria-label="Kill job ${CSS.escape(jobId)}"]`)) break;
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }
  $("jobs-refresh").addEventListener("click", refreshJobs);

  // ---- packs and providers -------------------------------------------------------------------
  // Pack names, errors and tool names come from the account's mcp.json and from the packs'
  // servers: text only, like everything else here.
  const trustWords = {
    always: "trusted for this workdir",
    once: "trusted until glovebox stops",
    waiting: "waiting for you (see Approvals)",
    refused: "refused",
  };
  let lastPacks = null;
  let packsTimer = 0;
  // `op` is "packs", or "packs_ask_again": forget the refusals first, so listing asks again.
  async function refreshPacks(attempt, op = "packs") {
    clearTimeout(packsTimer);
    const body = $("packs").tBodies[0];
    let r;
    try { r = await manage({ name: op }); } catch (e) {
      lastPacks = null;
      clear(body);
      body.append(el("tr", {}, el("td", { colspan: "7", class: "quiet", text: `Packs cannot be listed: ${e.message}` })));
      return;
    }
    const errors = $("packs-errors");
    clear(errors);
    for (const e of r.errors || []) errors.append(el("li", { class: "warning", text: e }));
    // Unchanged packs keep their rows (nothing is rebuilt under the pointer).
    const shown = JSON.stringify(r.packs);
    if (shown !== lastPacks || !body.rows.length) {
      lastPacks = shown;
      clear(body);
      for (const p of r.packs) {
        const tools = p.tools.length
          ? el("ul", { class: "tool-names" }, ...p.tools.map((t) => el("li", {}, el("code", { text: t }))))
          : el("span", { class: "quiet", text: "none" });
        // `data-label` names each cell where a narrow window stacks a pack's row (app.css).
        body.append(el("tr", { class: `pack state-${p.state}`, "data-pack": `${p.origin}:${p.name}` },
          el("th", { scope: "row" }, el("code", { text: p.name })),
          el("td", { "data-label": "From", text: p.origin === "project" ? "project" : "account" }),
          el("td", { "data-label": "State", class: "pack-state", text: p.state }),
          el("td", { "data-label": "Tools" }, tools),
          el("td", { "data-label": "Trust" }, p.origin === "project" ? (trustWords[p.trust] || p.trust) : "—",
            p.origin === "project" && p.trust === "refused"
              ? el("button", { type: "button", class: "ask-again", "aria-label": `Ask again about ${p.name}`,
                  onclick: () => refreshPacks(0, "packs_ask_again") }, "Ask again")
              : null),
          el("td", { "data-label": "Why not running", class: "pack-message" }, p.message ? el("code", { text: p.message }) : ""),
          el("td", { "data-label": "Change" }, p.origin === "project" ? "" :
            el("button", { type: "button", class: "deny", text: "Remove", "aria-label": `Remove pack ${p.name}`,
              onclick: () => changePack({ name: "remove_pack", pack: p.name }) }))));
      }
      if (!r.packs.length) {
        body.append(el("tr", {}, el("td", { colspan: "7", class: "quiet",
          text: r.enabled ? "No pack is configured." : "No pack is listed while the account's tools are off." })));
      }
    }
    // A pack still starting comes with its tools in a later listing; so does a project pack
    // once its trust ask is answered (the answer is recorded at the gate just after it is given).
    const unsettled = r.packs.some((p) => p.state === "starting" || p.trust === "waiting");
    if (activePanel === "packs" && attempt < PACKS_RELIST_TRIES && unsettled) {
      packsTimer = setTimeout(() => refreshPacks(attempt + 1), PACKS_RELIST_MS);
    }
  }
  $("packs-refresh").addEventListener("click", () => refreshPacks(0));

  // The account's own packs: added, replaced and removed by the gate, which checks each
  // definition as the pack host reads it and says why one is refused.
  async function changePack(op) {
    try {
      const r = await manage(op);
      toast(r.summary);
      if (op.name === "set_pack") $("pack-form").reset();
      refreshPacks(0);
    } catch (e) {
      toast(`The pack was not ${op.name === "set_pack" ? "added" : "removed"}: ${e.message}`);
    }
  }
  $("pack-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const lines = (id) => $(id).value.split("\n").map((l) => l.trim()).filter(Boolean);
    const pack = $("pack-name").value.trim();
    const command = lines("pack-command");
    const url = $("pack-url").value.trim();
    if (!pack) return;
    if (Boolean(url) === Boolean(command.length)) {
      toast("Give the pack's command, or the address of its server (not both).");
      return;
    }
    const definition = url ? { url } : { command: command[0], args: command.slice(1) };
    const env = {};
    for (const line of lines("pack-env")) {
      const at = line.indexOf("=");
      if (at < 1) {
        toast(`Environment line ${JSON.stringify(line)} is not NAME=VALUE.`);
        return;
      }
      env[line.slice(0, at)] = line.slice(at + 1);
    }
    if (Object.keys(env).length) definition.env = env;
    if ($("pack-network").value) definition.network = $("pack-network").value;
    changePack({ name: "set_pack", pack, definition });
  });

  // Pack secrets: names only, ever; a value goes in once and is cleared from the page at once.
  function renderSecrets(names) {
    const ul = $("secrets");
    clear(ul);
    for (const name of names) {
      ul.append(el("li", { class: "secret", "data-secret": name }, el("code", { text: name }), " ",
        el("button", { type: "button", class: "deny", text: "Delete", "aria-label": `Delete secret ${name}`,
          onclick: () => changeSecret({ name: "remove_secret", secret: name }, `Secret ${name} deleted`) })));
    }
    if (!names.length) ul.append(el("li", { class: "quiet", text: "No secret is stored." }));
  }
  async function refreshSecrets() {
    try { renderSecrets((await manage({ name: "secrets" })).names); } catch { /* shown on the next try */ }
  }
  async function changeSecret(op, said) {
    try {
      const r = await manage(op);
      renderSecrets(r.names);
      const restarted = (r.restarted || []).length ? `; restarted ${r.restarted.join(", ")}` : "";
      toast(`${r.changed ? said : "Nothing changed"}${restarted}.`);
      if (restarted) refreshPacks(0);
    } catch (e) {
      toast(`The secret was not changed: ${e.message}`);
    }
  }
  $("secret-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const secret = $("secret-name").value.trim();
    const value = $("secret-value").value;
    $("secret-value").value = "";
    if (!secret || !value) return;
    changeSecret({ name: "set_secret", secret, value }, `Secret ${secret} stored`);
  });

  let lastProviders = null;
  function renderProviders(list) {
    const shown = JSON.stringify(list);
    const ul = $("providers");
    if (shown === lastProviders && ul.childNodes.length) return;
    lastProviders = shown;
    clear(ul);
    for (const p of list) {
      ul.append(el("li", { class: "provider", "data-connection": p.connection_id },
        el("code", { text: p.connection_id }), ": ",
        p.tools.length ? p.tools.map((t) => `client__${t}`).join(", ") : "no tools yet"));
    }
    if (!list.length) ul.append(el("li", { class: "quiet", text: "No provider is connected." }));
  }
  async function refreshProviders() {
    try { renderProviders((await manage({ name: "providers" })).providers); } catch { /* shown on the next try */ }
  }
  // Providers come and go without telling approvers: the list is read again while it is shown.
  setInterval(() => {
    if (activePanel === "packs" && !document.hidden && ws && ws.readyState === WebSocket.OPEN) refreshProviders();
  }, PROVIDERS_POLL_MS);

  notifyState();
  setArmed(false);
  connect();
})();
