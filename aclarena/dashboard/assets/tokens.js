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
