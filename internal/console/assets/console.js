// Live updates for the operator console (embedded; nothing is fetched
// from elsewhere). A page whose <body> carries data-live streams its live
// region from the server: the same URL, asked for as text/event-stream,
// sends the region re-rendered (server-side, escaped by html/template)
// whenever it changed. Forms stay outside the region, so what an operator
// types is never replaced.
(function () {
  "use strict";
  var region = document.getElementById("live");
  var status = document.getElementById("live-status");
  if (!region || !window.EventSource || document.body.dataset.live !== "on") {
    if (status) status.textContent = "";
    return;
  }
  var es = new EventSource(location.pathname + location.search);
  es.onopen = function () { if (status) status.textContent = "live"; };
  es.onerror = function () { if (status) status.textContent = "reconnecting…"; };
  es.onmessage = function (e) {
    region.innerHTML = e.data;
    document.body.dataset.updated = String(Date.now());
    if (status) status.textContent = "live · " + new Date().toLocaleTimeString();
  };
})();
