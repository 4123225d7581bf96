// Table filtering and sorting for the static report. Reads only the page's own DOM and
// writes text, never markup, so nothing from test data is ever parsed as HTML.
(function () {
  "use strict";

  function rowsOf(table) {
    return Array.prototype.slice.call(table.tBodies[0] ? table.tBodies[0].rows : []);
  }

  function showCount(table) {
    var rows = rowsOf(table);
    var shown = rows.filter(function (r) { return !r.hidden; }).length;
    var counter = document.querySelector('[data-count-for="' + table.id + '"]');
    if (counter) { counter.textContent = shown + " of " + rows.length + " rows"; }
    var empty = table.nextElementSibling;
    if (empty && empty.classList.contains("empty")) { empty.hidden = shown !== 0; }
  }

  function applyFilter(input) {
    var table = document.getElementById(input.getAttribute("data-filter-table"));
    if (!table) { return; }
    var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    rowsOf(table).forEach(function (row) {
      var text = row.textContent.toLowerCase();
      row.hidden = !words.every(function (w) { return text.indexOf(w) !== -1; });
    });
    showCount(table);
  }

  function cellValue(row, index, numeric) {
    var cell = row.cells[index];
    if (!cell) { return numeric ? 0 : ""; }
    var raw = cell.getAttribute("data-value");
    if (numeric) {
      var n = parseFloat(raw !== null ? raw : cell.textContent.replace(/[,%<>]/g, ""));
      return isNaN(n) ? -Infinity : n;
    }
    return (raw !== null ? raw : cell.textContent).trim().toLowerCase();
  }

  function sortBy(th) {
    var table = th.closest("table");
    var index = Array.prototype.indexOf.call(th.parentNode.cells, th);
    var numeric = th.getAttribute("data-sort") === "num";
    // Numbers sort biggest first on the first click, text A to Z.
    var ascending = th.classList.contains("desc") || (!th.classList.contains("asc") && !numeric);
    Array.prototype.forEach.call(th.parentNode.cells, function (c) { c.classList.remove("asc", "desc"); });
    th.classList.add(ascending ? "asc" : "desc");
    var rows = rowsOf(table);
    rows.sort(function (a, b) {
      var x = cellValue(a, index, numeric), y = cellValue(b, index, numeric);
      var order = x < y ? -1 : x > y ? 1 : 0;
      return ascending ? order : -order;
    });
    var body = table.tBodies[0];
    rows.forEach(function (r) { body.appendChild(r); });
  }

  document.querySelectorAll("input[data-filter-table]").forEach(function (input) {
    input.addEventListener("input", function () { applyFilter(input); });
    var table = document.getElementById(input.getAttribute("data-filter-table"));
    if (table) { showCount(table); }
  });
  document.querySelectorAll("th[data-sort]").forEach(function (th) {
    th.addEventListener("click", function () { sortBy(th); });
  });
})();
