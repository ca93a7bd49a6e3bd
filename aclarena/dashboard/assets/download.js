// Data downloads on every page: above each figure "CSV" and "JSON" of the data it draws (read from
// the plotly graph in the page, so what is saved is what is shown), above each table "CSV" and
// "LaTeX" (booktabs). Bars are added when figures or tables appear and clicks are handled here.
(function () {
    function cell(v) {
        if (v === null || v === undefined) { return ""; }
        if (typeof v === "object") { v = JSON.stringify(v); }
        v = String(v);
        return /[",\n]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v;
    }
    function csv(rows) { return rows.map(function (r) { return r.map(cell).join(","); }).join("\n") + "\n"; }
    function save(name, text, type) {
        var a = document.createElement("a");
        a.href = URL.createObjectURL(new Blob([text], {type: type}));
        a.download = name;
        document.body.appendChild(a);
        a.click();
        setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 0);
    }
    function at(a, i) { return a && i < a.length ? a[i] : null; }
    // plain arrays (plotly decodes base64 "bdata" arrays into typed arrays in _fullData)
    function arr(v) {
        if (v === null || v === undefined) { return null; }
        if (ArrayBuffer.isView(v)) { return Array.from(v); }
        if (Array.isArray(v)) { return v.map(arr); }
        return v;
    }
    // an error bar's ends (the interval drawn), so that a CSV keeps what the figure shows
    function bounds(t, sign) {
        var flat = t.orientation === "h", e = flat ? t.error_x : t.error_y, y = arr(flat ? t.x : t.y);
        if (!e || e.visible === false || e.type !== "data" || !y) { return null; }
        var plus = arr(e.array) || [], minus = e.symmetric === false ? arr(e.arrayminus) || [] : plus;
        return y.map(function (v, i) {
            var d = sign > 0 ? at(plus, i) : at(minus, i);
            return v === null || d === null || d === undefined ? null : v + sign * d;
        });
    }
    function traces(gd) {
        return (gd._fullData || gd.data || []).map(function (t) {
            return {type: t.type, name: t.name, x: arr(t.x), y: arr(t.y), z: arr(t.z), text: arr(t.text),
                    customdata: arr(t.customdata), header: t.header, cells: t.cells, low: bounds(t, -1),
                    high: bounds(t, 1)};
        });
    }
    function figureRows(gd) {
        var rows = [["trace", "x", "y", "z", "text", "customdata", "low", "high"]];
        traces(gd).forEach(function (t, k) {
            var name = t.name || t.type + " " + k;
            if (t.type === "heatmap" && t.z) {
                t.z.forEach(function (row, i) {
                    (row || []).forEach(function (z, j) {
                        rows.push([name, at(t.x, j), at(t.y, i), z, t.text ? at(t.text[i], j) : null,
                                   t.customdata && t.customdata[i] ? at(t.customdata[i], j) : null]);
                    });
                });
            } else if (t.type === "table") {
                var head = arr(t.header && t.header.values) || [];
                var cols = arr(t.cells && t.cells.values) || [];
                rows = [head];
                for (var i = 0; cols.length && i < cols[0].length; i++) {
                    rows.push(cols.map(function (c) { return c[i]; }));
                }
            } else {
                var n = Math.max((t.x || []).length, (t.y || []).length);
                for (var i2 = 0; i2 < n; i2++) {
                    rows.push([name, at(t.x, i2), at(t.y, i2), null, Array.isArray(t.text) ? at(t.text, i2) : null,
                               at(t.customdata, i2), at(t.low, i2), at(t.high, i2)]);
                }
            }
        });
        return rows;
    }
    function figureJson(gd) {
        var title = gd.layout && gd.layout.title ? (gd.layout.title.text || gd.layout.title) : null;
        return JSON.stringify({title: title, data: traces(gd).map(function (t) {
            return {type: t.type, name: t.name, x: t.x, y: t.y, z: t.z, text: t.text, customdata: t.customdata,
                    low: t.low, high: t.high};
        })}, null, 1);
    }
    function tableRows(table) {
        return Array.prototype.map.call(table.rows, function (r) {
            return Array.prototype.map.call(r.cells, function (c) { return c.innerText.trim(); });
        });
    }
    function latex(rows) {
        var esc = function (s) {
            return String(s).replace(/[\\&%$#_{}~^]/g, function (m) {
                return {"\\": "\\textbackslash{}", "~": "\\textasciitilde{}", "^": "\\textasciicircum{}"}[m] || "\\" + m;
            });
        };
        var n = rows.length ? rows[0].length : 0;
        var body = rows.slice(1).map(function (r) { return r.map(esc).join(" & ") + " \\\\"; }).join("\n");
        return "\\begin{tabular}{" + "l".repeat(n) + "}\n\\toprule\n" + (rows[0] || []).map(esc).join(" & ") +
            " \\\\\n\\midrule\n" + body + "\n\\bottomrule\n\\end{tabular}\n";
    }
    function bar(target, kind, buttons) {
        var b = document.createElement("div");
        b.className = "data-download";
        b.dataset.target = target;
        b.dataset.kind = kind;
        b.innerHTML = buttons.map(function (x) {
            return '<button type="button" data-what="' + x + '">' + x + "</button>";
        }).join("");
        return b;
    }
    function decorate() {
        // inside the graph's box, positioned over its top-left corner: a sibling would take
        // space from the figure in flex rows and upset plotly's sizing
        document.querySelectorAll(".dash-graph[id]").forEach(function (g) {
            if (g.querySelector(":scope > .data-download")) { return; }
            g.insertBefore(bar(g.id, "figure", ["CSV", "JSON"]), g.firstChild);
        });
        document.querySelectorAll("table.simple[id]").forEach(function (t) {
            var prev = t.previousElementSibling;
            if (prev && prev.classList.contains("data-download")) { return; }
            t.parentNode.insertBefore(bar(t.id, "table", ["CSV", "LaTeX"]), t);
        });
    }
    var pending = false;
    new MutationObserver(function () {
        if (pending) { return; }
        pending = true;
        window.requestAnimationFrame(function () { pending = false; decorate(); });
    }).observe(document.documentElement, {childList: true, subtree: true});
    document.addEventListener("click", function (e) {
        var button = e.target.closest && e.target.closest(".data-download button");
        if (!button) { return; }
        var box = button.parentNode, what = button.dataset.what, el = document.getElementById(box.dataset.target);
        if (!el) { return; }
        var name = box.dataset.target;
        if (box.dataset.kind === "figure") {
            var gd = el.querySelector(".js-plotly-plot");
            if (!gd) { return; }
            if (what === "CSV") { save(name + ".csv", csv(figureRows(gd)), "text/csv"); }
            else { save(name + ".json", figureJson(gd), "application/json"); }
        } else if (what === "CSV") { save(name + ".csv", csv(tableRows(el)), "text/csv"); }
        else { save(name + ".tex", latex(tableRows(el)), "application/x-tex"); }
    });
}());
