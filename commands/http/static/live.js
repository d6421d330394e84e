// The web pages' live view (served by the ledger itself as /ui/static/live.js: the pages' Content-Security-Policy
// runs no inline script). The <script> element names the stream and the event types to follow; on each event the
// page is fetched again and its #page swapped in (one fetch at a time). An `error` event from the server (the
// token was revoked, expired, or its user removed) ends the stream: the page says why and stops following.
(function () {
  var s = document.currentScript, status = document.getElementById("live-status");
  var busy = false, again = false;
  var es = new EventSource(s.dataset.stream);
  function say(text) { if (status) { status.textContent = text; } }
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.pathname + location.search, {credentials: "same-origin", cache: "no-store"})
      .then(function (r) { return r.text(); })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("page");
        var old = document.getElementById("page");
        if (fresh && old) { old.replaceWith(fresh); say("live · " + (fresh.dataset.version ? "v" + fresh.dataset.version : "updated")); }
      })
      .finally(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  JSON.parse(s.dataset.types).forEach(function (t) { es.addEventListener(t, refresh); });
  es.onopen = function () { say("live"); };
  es.addEventListener("error", function (e) {
    if (e.data) {  // the server's last word: why the stream ended
      es.close();
      try { say("ended: " + JSON.parse(e.data).error.code); } catch (x) { say("ended"); }
    } else {
      say("reconnecting…");
    }
  });
})();
