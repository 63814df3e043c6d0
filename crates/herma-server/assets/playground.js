// The preview playground: runs the form through POST /api/preview without reloading the page
// and renders the report with DOM nodes (never innerHTML). Without this script the form posts
// to /preview and Herma renders the same report server-side.
"use strict";

(function () {
  const form = document.getElementById("preview-form");
  const out = document.getElementById("result-body");
  if (!form || !out) return;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    for (const child of children) {
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function body(protocol, prompt) {
    if (protocol === "responses") return { model: "preview", input: prompt };
    if (protocol === "chat_completions") {
      return { model: "preview", messages: [{ role: "user", content: prompt }] };
    }
    return { model: "preview", max_tokens: 1024, messages: [{ role: "user", content: prompt }] };
  }

  function directText(response) {
    if (!response) return null;
    let texts = [];
    if (Array.isArray(response.choices)) {
      const content = response.choices[0] && response.choices[0].message && response.choices[0].message.content;
      if (typeof content === "string") texts = [content];
    } else if (Array.isArray(response.output)) {
      for (const item of response.output) {
        for (const part of item.content || []) if (typeof part.text === "string") texts.push(part.text);
      }
    } else if (Array.isArray(response.content)) {
      for (const block of response.content) if (typeof block.text === "string") texts.push(block.text);
    }
    return texts.length ? texts.join("") : null;
  }

  function render(report, request) {
    const nodes = [
      el("p", {}, "Decision: ", el("span", { class: "decision " + report.decision, id: "decision" }, report.decision)),
    ];
    const tiers = report.tiers || {};
    const matches = [].concat(tiers.keyword || [], tiers.semantic || [], tiers.micromodel || []);
    if (matches.length === 0) {
      nodes.push(el("p", {}, "No rule matched: Herma would forward the request unchanged."));
    } else {
      const list = el("ul", { class: "matches" });
      for (const m of matches) {
        list.append(el("li", {}, el("code", {}, m.provision_id), " v" + m.version + " by ", el("code", {}, m.trigger),
          m.applied ? "" : " (not applied)"));
      }
      nodes.push(el("h3", {}, "Matched rules"), list);
    }
    const answer = directText(report.direct_response);
    if (answer !== null) nodes.push(el("h3", {}, "Direct answer"), el("pre", {}, el("code", {}, answer)));
    if (report.shim) {
      nodes.push(el("h3", {}, "Context added"), el("p", { class: "notice" }, "Placed " + report.shim.placement + "."),
        el("pre", {}, el("code", {}, report.shim.text)));

    }
    nodes.push(el("p", { class: "notice" }, "persisted: " + report.persisted + " · upstream contacted: " + report.upstream_contacted));
    nodes.push(el("details", {},
      el("summary", {}, "The API call"),
      el("pre", {}, el("code", {}, "POST /api/preview\n" + JSON.stringify(request, null, 2))),
      el("pre", {}, el("code", {}, JSON.stringify(report, null, 2)))));
    out.replaceChildren(...nodes);
  }

  function fail(message) {
    out.replaceChildren(el("p", { class: "error", role: "alert" }, message));
  }

  for (const link of document.querySelectorAll(".examples a[data-prompt]")) {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      form.elements.prompt.value = link.dataset.prompt;
      form.requestSubmit();
    });
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const request = { protocol: form.elements.protocol.value, body: body(form.elements.protocol.value, form.elements.prompt.value) };
    out.setAttribute("aria-busy", "true");
    try {
      const response = await fetch("/api/preview", {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json" },
        body: JSON.stringify(request),
      });
      const payload = await response.json();
      if (!response.ok) {
        fail(payload.detail || payload.title || "The preview failed (" + response.status + ").");
      } else {
        render(payload, request);
      }
    } catch (err) {
      fail("Herma could not be reached: " + err.message);
    } finally {
      out.removeAttribute("aria-busy");
    }
  });
})();
