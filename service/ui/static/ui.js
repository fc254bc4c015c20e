// kaudit pages: the regrade button (operator token) and live job progress by polling the JSON API.
// No framework; every value from the server is written with textContent, never as HTML.
"use strict";
(function () {
  const form = document.getElementById("regrade-form");
  if (!form) return;
  const status = document.getElementById("regrade-status");
  const say = (text) => { status.textContent = text; };
  const saved = sessionStorage.getItem("kaudit-token");
  if (saved) form.elements.token.value = saved;

  async function poll(jobId) {
    for (;;) {
      const r = await fetch("/jobs/" + encodeURIComponent(jobId), { headers: authHeader() });
      if (!r.ok) { say("job " + jobId + ": cannot read its state (HTTP " + r.status + ")"); return; }
      const job = await r.json();
      let line = "job " + job.id + ": " + job.state + (job.phase ? " · " + job.phase : "") +
        " · attempt " + job.attempts + "/" + job.max_attempts;
      const pr = job.progress || {};
      const phases = Object.keys(pr.phases || {});
      if (phases.length) line += " · " + phases.join(" → ");
      if (pr.benchmark_shapes_done && pr.benchmark_shapes_done.length) line += " · shapes done " + pr.benchmark_shapes_done.join(",");
      if (pr.last_line) line += " · " + pr.last_line;
      if (job.error) line += " · error: " + job.error.trim().split("\n").pop();
      say(line);
      status.dataset.state = job.state;
      if (["succeeded", "failed", "cancelled"].includes(job.state)) return;
      await new Promise((res) => setTimeout(res, 1000));
    }
  }
  function authHeader() {
    const t = form.elements.token.value.trim();
    return t ? { Authorization: "Bearer " + t } : {};
  }
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const token = form.elements.token.value.trim();
    sessionStorage.setItem("kaudit-token", token);
    say("enqueueing…");
    const r = await fetch("/runs/" + encodeURIComponent(form.dataset.run) + "/regrade", {
      method: "POST",
      headers: Object.assign({ "Content-Type": "application/json" }, authHeader()),
      body: JSON.stringify({ force: form.elements.force.checked }),
    });
    let body = {};
    try { body = await r.json(); } catch (e) { body = {}; }
    if (r.status === 409 && body.job) { say(body.detail); status.dataset.state = "failed"; return; }
    if (!r.ok) { say("HTTP " + r.status + ": " + (typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail))); return; }
    say("job " + body.job.id + (body.created ? " enqueued" : " already exists") + ": " + body.job.state);
    status.dataset.state = body.job.state;
    poll(body.job.id);
  });
})();
