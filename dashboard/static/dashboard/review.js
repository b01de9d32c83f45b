// The reviewer workspace's keyboard: m = match, n = no match, e = escalate, s = skip, ? = help.
// A decision needs a reason: the key fills the verdict and moves to the reason field; Enter submits.
(function () {
  const form = document.getElementById("review-form");
  if (!form) return;
  const reason = form.querySelector("textarea[name=reason]");
  const verdict = form.querySelector("input[name=verdict]");
  const label = document.getElementById("review-verdict");
  const help = document.getElementById("review-help");
  const keys = { m: "match", n: "no_match", e: "escalate", s: "skip" };
  document.addEventListener("keydown", function (event) {
    if (event.target === reason) {
      if (event.key === "Enter" && !event.shiftKey && verdict.value) { event.preventDefault(); form.submit(); }
      if (event.key === "Escape") { reason.blur(); }
      return;
    }
    if (event.key === "?") { help.hidden = !help.hidden; return; }
    const chosen = keys[event.key];
    if (!chosen) return;
    event.preventDefault();
    verdict.value = chosen;
    label.textContent = chosen.replace("_", " ");
    if (chosen === "skip") { form.submit(); return; }
    reason.focus();
  });
  form.querySelectorAll("button[data-verdict]").forEach(function (button) {
    button.addEventListener("click", function () { verdict.value = button.dataset.verdict; });
  });
})();
