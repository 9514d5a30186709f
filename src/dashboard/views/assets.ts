/**
 * The dashboard's CSS and client script: constants inlined into every page
 * (with the response's nonce), so the pages work offline and need no build step.
 */

/** The stylesheet. */
export const STYLE = `
:root { --fg:#1d2330; --muted:#667085; --line:#e4e7ec; --bg:#f6f7f9; --card:#fff; --accent:#2f5bea;
  --queued:#2f5bea; --running:#b25e09; --succeeded:#12805c; --failed:#c4320a; --dead:#7a0c2e; --cancelled:#667085; --paused:#b54708; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--fg); background:var(--bg); }
header { display:flex; align-items:center; gap:24px; padding:0 24px; height:52px; background:#161b26; color:#fff; }
header .brand { font-weight:700; letter-spacing:.3px; color:#fff; text-decoration:none; font-size:16px; }
header nav a { color:#c8cedb; text-decoration:none; margin-right:16px; padding:15px 0; border-bottom:2px solid transparent; }
header nav a.active, header nav a:hover { color:#fff; border-bottom-color:#7c9cff; }
header .meta { margin-left:auto; color:#98a2b3; font-size:12px; display:flex; gap:12px; align-items:center; }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; background:#344054; color:#fff; }
main { max-width:1200px; margin:0 auto; padding:20px 24px 48px; }
h1 { font-size:20px; margin:4px 0 16px; }
h2 { font-size:15px; margin:24px 0 8px; color:#344054; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:16px; margin-bottom:16px; }
table { width:100%; border-collapse:collapse; background:var(--card); border:1px solid var(--line); border-radius:8px; overflow:hidden; }
th, td { text-align:left; padding:7px 12px; border-bottom:1px solid var(--line); vertical-align:middle; }
td button { padding:2px 10px; font-size:12px; }
h1 .mono { font-size:inherit; }
th { background:#f9fafb; font-weight:600; color:#475467; font-size:12px; text-transform:uppercase; letter-spacing:.4px; }
tr:last-child td { border-bottom:0; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
td.zero { color:#c0c5cf; }
td.nowrap { white-space:nowrap; }
tr.total td { font-weight:600; background:#f9fafb; }
a { color:var(--accent); }
.status { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px; font-weight:600; color:#fff; }
.status-queued { background:var(--queued); } .status-running { background:var(--running); }
.status-succeeded { background:var(--succeeded); } .status-failed { background:var(--failed); }
.status-dead { background:var(--dead); } .status-archived { background:#475467; }
.status-cancelled { background:var(--cancelled); } .status-paused, .status-parked { background:var(--paused); }
.muted { color:var(--muted); }
a.tag { display:inline-block; padding:0 6px; border:1px solid var(--muted); border-radius:4px; font-size:12px; text-decoration:none; }
.mono, pre, code { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; }
pre { background:#0f1522; color:#e6e9ef; padding:12px 14px; border-radius:6px; overflow:auto; max-height:420px; white-space:pre-wrap; word-break:break-word; margin:0; }
pre.error { background:#fff5f3; color:#7a271a; border:1px solid #fecdca; }
dl.fields { display:grid; grid-template-columns:160px 1fr; gap:6px 16px; margin:0; }
dl.fields dt { color:var(--muted); } dl.fields dd { margin:0; }
div.toolbar { display:flex; flex-wrap:wrap; gap:8px 32px; align-items:end; margin-bottom:12px; }
div.toolbar form.filters { margin:0; }
form.filters { display:flex; flex-wrap:wrap; gap:8px; align-items:end; margin-bottom:12px; }
form.filters label { display:flex; flex-direction:column; font-size:12px; color:var(--muted); gap:2px; }
input, select { font:inherit; padding:5px 8px; border:1px solid #d0d5dd; border-radius:6px; background:#fff; }
button { font:inherit; padding:5px 12px; border-radius:6px; border:1px solid #d0d5dd; background:#fff; cursor:pointer; }
button.primary { background:var(--accent); border-color:var(--accent); color:#fff; }
button.danger { color:#b42318; border-color:#fda29b; }
button:hover { filter:brightness(.96); }
form.inline { display:inline; margin:0 4px 0 0; }
.actions { display:flex; gap:8px; margin:12px 0; }
.notice { padding:10px 14px; border-radius:6px; background:#ecfdf3; border:1px solid #abefc6; color:#067647; margin-bottom:16px; }
.notice.warn { background:#fffaeb; border-color:#fedf89; color:#93370d; }
.scroll { overflow-x:auto; }
.pager { display:flex; gap:12px; margin-top:12px; align-items:center; }
.chart svg { width:100%; height:auto; max-height:220px; display:block; }
.legend { display:flex; gap:16px; font-size:12px; color:var(--muted); margin-top:6px; flex-wrap:wrap; }
.legend i { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:4px; vertical-align:-1px; }
.stale #updated { color:#fda29b; }
.swatch-ok { background:#12805c; } .swatch-bad { background:#c4320a; }
`;

/** Live refresh of `#live` from `?partial=1`, and confirmation of every form with `data-confirm`. */
export const SCRIPT = `
(function () {
  var live = document.getElementById('live');
  var every = Number(document.body.getAttribute('data-refresh-ms'));
  var updated = document.getElementById('updated');
  function stamp(ok) {
    document.body.classList.toggle('stale', !ok);
    if (updated) updated.textContent = ok ? 'updated ' + new Date().toLocaleTimeString() : 'refresh failed; retrying';
  }
  function tick() {
    var busy = live && live.contains(document.activeElement) && document.activeElement !== document.body;
    if (!live || document.visibilityState !== 'visible' || busy) return schedule();
    var url = new URL(location.href);
    url.searchParams.set('partial', '1');
    fetch(url, { credentials: 'same-origin', headers: { accept: 'text/html' } })
      .then(function (res) { if (!res.ok) throw new Error(String(res.status)); return res.text(); })
      .then(function (text) { live.innerHTML = text; stamp(true); }, function () { stamp(false); })
      .then(schedule);
  }
  function schedule() { setTimeout(tick, every); }
  if (live && every > 0) schedule();
  document.addEventListener('submit', function (event) {
    var message = event.target.getAttribute('data-confirm');
    if (message && !window.confirm(message)) event.preventDefault();
  });
})();
`;
