// Tokens page: a click on a token of the coloured text pins it (the text is plain HTML written by a
// clientside callback, so the click is caught here and handed to Dash through set_props).
document.addEventListener("click", function (event) {
    var tok = event.target.closest && event.target.closest(".token-text span.tok[data-i]");
    if (!tok) { return; }
    var box = tok.closest(".token-text");
    if (!box || box.dataset.seq === undefined || box.dataset.seq === "") { return; }
    if (window.dash_clientside && window.dash_clientside.set_props) {
        window.dash_clientside.set_props("tokens-pin", {data: {seq: Number(box.dataset.seq), pos: Number(tok.dataset.i)}});
    }
});


// The page's clientside callbacks (ClientsideFunction("tokens", ...) in aclarena/dashboard/pages/tokens.py).
// (added to the renderer's own object, never a copy of it: the renderer keeps a reference)
window.dash_clientside = window.dash_clientside || {};
window.dash_clientside.tokens = {
  
    // Writes the text HTML into the page, marks the pinned token and scrolls it into view.
    drawText: function (render, pin) {
        render = render || {};
        var put = function(id, markup) {
            var el = document.getElementById(id);
            if (!el) { return; }
            if (el.dataset.markup !== String(render.version)) { el.innerHTML = markup || ""; }
            el.dataset.markup = String(render.version);
            el.dataset.seq = render.seq === undefined ? "" : String(render.seq);
            el.querySelectorAll("span.tok.pinned").forEach(function(s) { s.classList.remove("pinned"); });
            if (pin && render.seq === pin.seq) {
                var hit = el.querySelector('span.tok[data-i="' + pin.pos + '"]');
                if (hit) { hit.classList.add("pinned"); hit.scrollIntoView({block: "nearest"}); }
            }
        };
        put("tokens-text", render.a);
        put("tokens-text-b", render.b);
        return [render.title_a || "", render.title_b || "", render.b ? {} : {display: "none"}, render.version];
    },
    // Where a click on a table row or a scatter point goes: {seq, pos}, or no update. In the browser:
    // a round trip to the server here cost a third of a sequence change (issue 46's 150 ms budget).
    jump: function (rankCell, substCell, click, rankRows, substRows) {
        var nothing = [window.dash_clientside.no_update, window.dash_clientside.no_update];
        var ctx = window.dash_clientside.callback_context;
        var trig = (ctx.triggered && ctx.triggered.length) ? ctx.triggered[0].prop_id.split(".")[0] : null;
        var fromCell = function(cell, rows) {
            if (!cell || !rows) { return null; }
            var row = rows.find(function(x) { return String(x.id) === String(cell.row_id); });
            return row ? {seq: Number(row.seq), pos: Number(row.pos)} : null;
        };
        var target = null;
        if (trig === "tokens-rank") { target = fromCell(rankCell, rankRows); }
        else if (trig === "tokens-subst") { target = fromCell(substCell, substRows); }
        else if (trig === "tokens-scatter" && click && click.points && click.points.length) {
            var cd = click.points[0].customdata;
            if (Array.isArray(cd) && cd.length === 2) { target = {seq: Number(cd[0]), pos: Number(cd[1])}; }
        }
        return target === null ? nothing : [target.seq, target];
    },
    // The prompt box's coloured reply (HTML written by the server's scorer).
    putPrompt: function (markup) {
        var el = document.getElementById("tokens-prompt-html");
        if (el) { el.innerHTML = markup || ""; }
        return window.dash_clientside.no_update;
    }
};
