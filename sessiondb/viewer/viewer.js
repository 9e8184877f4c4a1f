// sessiondb viewer: follows the transcript shown on the page live, and the first page of
// the sessions list.
//
// A transcript is shown a page at a time (the server's pages of seqs); a link to a
// record on another page is resolved to that page here.
//
// The server sends the page's changes as server-sent events ("change": a JSON list of
// operations on the items of <main id="records">, its head and its page links; "rows": rows of the sessions list to
// put at the top or remove). Each item's HTML is rendered and
// escaped by the server (the HTML export's renderer); it is parsed here with DOMParser
// into an inert document and moved in with DOM calls. No string of a session is ever
// evaluated, and the page's Content-Security-Policy allows no script but this file.
"use strict";

// The live badge of the page's bar.
function setStatus(text, state) {
  const status = document.getElementById("live");
  if (status) {
    status.textContent = text;
    status.className = "live " + state;
  }
}

// Follows the event stream at ``url``: ``handlers`` maps an event's name to what it
// does with the event; the badge says whether the stream is live, and a "failed" event
// (the database went away) ends it.
function follow(url, handlers) {
  const source = new EventSource(url);
  source.addEventListener("open", function () {
    setStatus("live", "on");
  });
  source.addEventListener("error", function () {
    setStatus(source.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting…", "off");
  });
  source.addEventListener("failed", function () {
    source.close();
    setStatus("database unavailable: reload", "off");
  });
  for (const [name, handle] of Object.entries(handlers)) {
    source.addEventListener(name, function (event) {
      handle(event, source);
    });
  }
}

(function () {
  const main = document.getElementById("records");
  if (!main || !main.dataset.session) {
    return;
  }
  const parser = new DOMParser();

  // The item wrapping one server-rendered fragment (the server's own HTML, escaped).
  function item(key, html) {
    const wrapper = document.createElement("div");
    wrapper.className = "item fresh";
    wrapper.id = "i-" + key;
    const parsed = parser.parseFromString(html, "text/html");
    for (const node of Array.from(parsed.body.childNodes)) {
      wrapper.appendChild(document.adoptNode(node));
    }
    return wrapper;
  }

  function atBottom() {
    const doc = document.documentElement;
    return window.innerHeight + window.scrollY >= doc.scrollHeight - 40;
  }

  function apply(ops) {
    const follow = atBottom();
    for (const op of ops) {
      if (op.op === "remove") {
        const old = document.getElementById("i-" + op.key);
        if (old && old.parentNode === main) {
          old.remove();
        }
      } else if (op.op === "put") {
        const fresh = item(op.key, op.html);
        const old = document.getElementById("i-" + op.key);
        if (old && old.parentNode === main) {
          main.replaceChild(fresh, old);
        } else {
          const after = op.after === null ? null : document.getElementById("i-" + op.after);
          if (after && after.parentNode === main) {
            after.after(fresh);
          } else if (op.after === null) {
            main.prepend(fresh);
          } else {
            main.appendChild(fresh);
          }
        }
      } else if (op.op === "pager") {
        for (const id of ["pager-top", "pager-bottom"]) {
          const pager = document.getElementById(id);
          if (pager) {
            const parsed = parser.parseFromString(op.html, "text/html");
            pager.replaceChildren(...Array.from(parsed.body.childNodes).map((n) => document.adoptNode(n)));
          }
        }
      } else if (op.op === "head") {
        const head = document.getElementById("session-head");
        if (head) {
          const parsed = parser.parseFromString(op.html, "text/html");
          head.replaceChildren(...Array.from(parsed.body.childNodes).map((n) => document.adoptNode(n)));
        }
      }
    }
    if (follow) {
      window.scrollTo(0, document.documentElement.scrollHeight);
    }
  }

  // A transcript is paged: a link to a record of another page (#r<seq>, say a fork's
  // parent's) goes to the page that holds it.
  function resolve() {
    const match = /^#r([0-9]{1,18})$/.exec(window.location.hash);
    if (!match || document.getElementById("r" + match[1]) || !main.dataset.first) {
      return;
    }
    const seq = parseInt(match[1], 10);
    if (seq < parseInt(main.dataset.first, 10) || seq > parseInt(main.dataset.last, 10)) {
      window.location.replace(
        "/s/" + encodeURIComponent(main.dataset.session) + "?at=" + seq + "#r" + seq,
      );
    }
  }
  resolve();
  window.addEventListener("hashchange", resolve);

  const url =
    "/s/" + encodeURIComponent(main.dataset.session) +
    "/events?from_seq=" + encodeURIComponent(main.dataset.seq || "0") +
    (main.dataset.first ? "&at=" + encodeURIComponent(main.dataset.first) : "");
  follow(url, {
    change: function (event) {
      apply(JSON.parse(event.data));
      main.dataset.seq = event.lastEventId;
    },
    gone: function (event, source) {
      source.close();
      setStatus("session deleted", "off");
    },
  });
})();

(function () {
  const main = document.getElementById("sessions");
  const rows = document.getElementById("session-rows");
  if (!main || !rows) {
    return;
  }
  const size = parseInt(main.dataset.size || "50", 10);
  const parser = new DOMParser();

  // A row of the server's own HTML (escaped): parsed inside a table, as a row must be.
  function row(html) {
    const parsed = parser.parseFromString("<table><tbody>" + html + "</tbody></table>", "text/html");
    const found = parsed.querySelector("tr");
    return found ? document.adoptNode(found) : null;
  }

  function apply(ops) {
    for (const op of ops) {
      const old = document.getElementById("row-" + op.key);
      if (old && old.parentNode === rows) {
        old.remove();
      }
      if (op.op === "put") {
        const fresh = row(op.html);
        if (fresh) {
          fresh.className = "fresh";
          rows.prepend(fresh);
        }
      }
    }
    while (rows.rows.length > size) {
      rows.lastElementChild.remove();
    }
    const empty = document.getElementById("no-sessions");
    if (empty && rows.rows.length > 0) {
      empty.remove();
    }
  }

  follow("/events", {
    rows: function (event) {
      apply(JSON.parse(event.data));
    },
  });
})();
