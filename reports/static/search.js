// Search over every test of the run. The index is split into script files
// (search/data-N.js) so it loads from file:// too, where fetch() of local files is blocked.
// Results are built with textContent only: test ids and details are never parsed as HTML.
(function () {
  "use strict";
  var index = window.REPORT_SEARCH;
  var records = [];
  var loaded = 0;
  var LIMIT = 500;
  var form = document.getElementById("search-form");
  var status = document.getElementById("status");
  var body = document.querySelector("#results tbody");
  var params = new URLSearchParams(window.location.search);
  ["q", "outcome", "category", "detail"].forEach(function (name) {
    if (params.get(name)) { document.getElementById(name).value = params.get(name); }
  });

  window.reportSearchChunk = function (number, rows) {
    for (var i = 0; i < rows.length; i++) { records.push(rows[i]); }
    loaded += 1;
    if (loaded < index.chunks) { load(loaded); }
    render();
  };

  function load(number) {
    var script = document.createElement("script");
    script.src = "search/data-" + number + ".js";
    script.onerror = function () { status.textContent = "Could not load " + script.src + "."; };
    document.body.appendChild(script);
  }

  function matches(record, words, outcome, category, detail) {
    var bucket = index.buckets[record[1]];
    if (outcome) {
      if (outcome.charAt(0) === "@" ? bucket !== outcome.slice(1) : index.outcomes[record[1]] !== outcome) { return false; }
    }
    if (category && index.categories[record[2]] !== category) { return false; }
    if (detail && record[3] !== detail) { return false; }
    if (!words.length) { return true; }
    var text = (record[0] + " " + record[3]).toLowerCase();
    for (var i = 0; i < words.length; i++) { if (text.indexOf(words[i]) === -1) { return false; } }
    return true;
  }

  function cell(row, text, className) {
    var td = document.createElement("td");
    if (className) { td.className = className; }
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function render() {
    var words = document.getElementById("q").value.toLowerCase().split(/\s+/).filter(Boolean);
    var outcome = document.getElementById("outcome").value;
    var category = document.getElementById("category").value;
    var detail = document.getElementById("detail").value;
    var found = 0;
    var fragment = document.createDocumentFragment();
    for (var i = 0; i < records.length; i++) {
      var r = records[i];
      if (!matches(r, words, outcome, category, detail)) { continue; }
      found += 1;
      if (found > LIMIT) { continue; }
      var row = document.createElement("tr");
      var td = cell(row, "", "test");
      var link = document.createElement("a");
      var page = Math.floor(r[5] / index.pageSize);
      link.href = "files/" + index.files[r[4]] + "-" + page + ".html#t" + r[5];
      link.textContent = r[0];
      td.appendChild(link);
      var badge = document.createElement("span");
      badge.className = "badge " + index.buckets[r[1]];
      badge.textContent = index.outcomes[r[1]];
      cell(row, "").appendChild(badge);
      cell(row, index.categories[r[2]]);
      cell(row, r[3]);
      fragment.appendChild(row);
    }
    body.textContent = "";
    body.appendChild(fragment);
    var note = (detail ? " with detail " + detail : "") +
      (found > LIMIT ? " (showing the first " + LIMIT + ")" : "");
    var progress = loaded < index.chunks ? " Loading the index: " + records.length + " of " + index.total + " tests…" : "";
    status.textContent = found + " matching tests" + note + "." + progress;
  }

  var timer = null;
  form.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(render, 120);
  });
  // The index streams in after the page has loaded, so the page opens at once and
  // results grow as each data file arrives.
  function start() { if (index.chunks > 0) { load(0); } else { render(); } }
  if (document.readyState === "complete") { start(); } else { window.addEventListener("load", start); }
})();
