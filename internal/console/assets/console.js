// Live updates for the operator console (embedded; nothing is fetched
// from elsewhere). A page whose <body> carries data-live streams its live
// region from the server: the same URL, asked for as text/event-stream,
// sends the region re-rendered (server-side, escaped by html/template)
// whenever it changed. Forms stay outside the region, so what an operator
// types is never replaced. EventSource itself splits the stream's lines
// (at CR, LF and CRLF alike, as the server splits them: live.go) and
// joins an event's data lines with LF. Times are UTC, as on every page.
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
  es.onerror = function () {
    // CLOSED: the console refused the stream (a session ended by a
    // logout); EventSource does not try again.
    if (status) status.textContent = es.readyState === EventSource.CLOSED ? "not live: reload the page" : "reconnecting…";
  };
  es.onmessage = function (e) {
    region.innerHTML = e.data;
    document.body.dataset.updated = String(Date.now());
    if (status) status.textContent = "live · " + utcTime(new Date());
  };
  // utcTime is hh:mm:ss UTC, whatever the browser's time zone.
  function utcTime(d) { return d.toISOString().slice(11, 19) + " UTC"; }
})();
