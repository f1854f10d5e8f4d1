/* ctxlake HTML report: sorting and filtering of data tables, in the page, no network.
   Reads cells through textContent and data-* attributes only; never writes HTML. */
(function () {
  "use strict";
  function key(cell) {
    if (!cell) { return ""; }
    var raw = cell.getAttribute("data-value");
    if (raw === null) { return cell.textContent.toLowerCase(); }
    var num = Number(raw);
    return raw !== "" && !isNaN(num) ? num : raw.toLowerCase();
  }
  function groups(body) {
    var out = [], byId = {};
    Array.prototype.forEach.call(body.rows, function (row) {
      var id = row.getAttribute("data-group") || String(out.length);
      if (!byId[id]) { byId[id] = { id: id, rows: [] }; out.push(byId[id]); }
      byId[id].rows.push(row);
    });
    return out;
  }
  function sortTable(table, index, th) {
    var body = table.tBodies[0];
    var desc = !th.classList.contains("sorted-desc") &&
               (th.classList.contains("sorted-asc") || th.getAttribute("data-sort") === "desc");
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (c) {
      c.classList.remove("sorted-asc", "sorted-desc");
    });
    th.classList.add(desc ? "sorted-desc" : "sorted-asc");
    var list = groups(body);
    list.forEach(function (g, i) { g.order = i; g.key = key(g.rows[0].cells[index]); });
    list.sort(function (a, b) {
      var x = a.key, y = b.key, cmp;
      if (typeof x === typeof y) { cmp = x < y ? -1 : (x > y ? 1 : 0); }
      else { cmp = typeof x === "number" ? -1 : 1; }
      if (desc) { cmp = -cmp; }
      return cmp || a.order - b.order;
    });
    list.forEach(function (g) { g.rows.forEach(function (r) { body.appendChild(r); }); });
  }
  function filterTable(table, input, counter) {
    var words = input.value.toLowerCase().split(/\s+/).filter(Boolean);
    var shown = 0;
    groups(table.tBodies[0]).forEach(function (g) {
      var text = g.rows.map(function (r) { return r.textContent.toLowerCase(); }).join(" ");
      var ok = words.every(function (w) { return text.indexOf(w) !== -1; });
      g.rows.forEach(function (r) { r.hidden = !ok; });
      if (ok) { shown += 1; }
    });
    if (counter) { counter.textContent = shown + " shown"; }
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, index) {
      if (th.hasAttribute("data-sort")) {
        th.addEventListener("click", function () { sortTable(table, index, th); });
      }
    });
  });
  document.querySelectorAll("input[data-filter]").forEach(function (input) {
    var table = document.getElementById(input.getAttribute("data-filter"));
    var counter = document.getElementById(input.getAttribute("data-filter") + "-count");
    if (table) {
      input.addEventListener("input", function () { filterTable(table, input, counter); });
    }
  });
}());
