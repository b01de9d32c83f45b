// The confirmation link carries its token in the fragment (#…), which the browser never sends to a
// server: put it into the form, and take it off the address bar (and so out of the history).
(function () {
  const field = document.getElementById("receipt-token");
  const token = decodeURIComponent(window.location.hash.slice(1));
  if (!field || !token) return;
  field.value = token;
  history.replaceState(null, "", window.location.pathname);
})();
