// berth inspector: live mode. Follows the session's live feed (Server-Sent Events from
// this server) and puts each new event, rendered and escaped by the server, at the top
// of the timeline. Parsed with DOMParser (which runs no script), never eval'd.
"use strict";

document.addEventListener("DOMContentLoaded", function () {
  var toggle = document.getElementById("live-toggle");
  if (!toggle) {
    return;
  }
  var list = document.getElementById("live-events");
  var status = document.getElementById("live-status");
  var source = null;

  function say(text) {
    status.textContent = text;
  }

  function stop(text) {
    if (source) {
      source.close();
      source = null;
    }
    toggle.setAttribute("aria-pressed", "false");
    toggle.textContent = "Follow live";
    say(text);
  }

  function start() {
    var session = encodeURIComponent(toggle.dataset.session);
    var from = toggle.dataset.nextSeq;
    source = new EventSource("/ui/sessions/" + session + "/live?from=" + encodeURIComponent(from));
    toggle.setAttribute("aria-pressed", "true");
    toggle.textContent = "Stop following";
    say("Following live from event " + from + ".");
    source.addEventListener("fragment", function (message) {
      var parsed = new DOMParser().parseFromString(message.data, "text/html");
      var item = parsed.body.firstElementChild;
      if (item) {
        item.classList.add("live-new");
        list.insertBefore(document.importNode(item, true), list.firstChild);
      }
      toggle.dataset.nextSeq = String(Number(message.lastEventId) + 1);
      say("Following live: event " + message.lastEventId + " arrived.");
    });
    source.addEventListener("signed-out", function () {
      stop("Signed out: live mode stopped.");
    });
    source.addEventListener("failed", function (message) {
      stop("Live mode stopped: " + message.data);
    });
    source.onerror = function () {
      say("Connection lost; reconnecting…");
    };
  }

  toggle.addEventListener("click", function () {
    if (source) {
      stop("Stopped.");
    } else {
      start();
    }
  });
});
