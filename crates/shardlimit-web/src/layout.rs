//! The frame every page shares, and its stylesheet.
//!
//! Every value goes into the page through maud's `(…)` splices, which
//! escape `<`, `>`, `&`, `"` and `'`: a subject is always text, never
//! markup. Nothing here uses `PreEscaped`.

use maud::{DOCTYPE, Markup, html};

use super::base::Base;

/// The stylesheet, served at `/style.css` under the mount prefix. Small on
/// purpose: system fonts, one table style, one banner.
pub(super) const STYLESHEET: &str = "\
:root{--fg:#1d232b;--muted:#5b6672;--line:#d9dee4;--bg:#f6f8fa;--accent:#1f5fa8;--warn:#8a4b00;--warnbg:#fff4e0;--bad:#a11b1b;--badbg:#fdecec;--ok:#1d6b34}
*{box-sizing:border-box}
body{margin:0;font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);background:#fff}
header{background:#16202b;color:#fff;padding:.6rem 1.5rem;display:flex;gap:1.5rem;align-items:baseline}
header .brand{font-weight:700;letter-spacing:.02em}
header nav a{color:#c9d6e3;text-decoration:none;margin-right:1rem}
header nav a:hover{color:#fff}
header form.find{margin-left:auto;display:flex;gap:.4rem}
header form.find input{padding:.2rem .5rem;border-radius:4px;border:1px solid #3a4a5c;min-width:14rem}
main{padding:1rem 1.5rem 3rem;max-width:1400px}
h1{font-size:1.4rem;margin:.6rem 0 1rem}
h2{font-size:1.1rem;margin:1.6rem 0 .5rem}
a{color:var(--accent)}
table{border-collapse:collapse;width:100%;margin:.5rem 0 1rem;font-size:.92rem}
th,td{text-align:left;padding:.35rem .6rem;border-bottom:1px solid var(--line);vertical-align:top}
th{background:var(--bg);font-weight:600}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.88em;word-break:break-all}
.node{white-space:nowrap;word-break:normal}
.banner{padding:.7rem 1rem;border-radius:6px;margin:0 0 1rem;border:1px solid}
.banner.warn{background:var(--warnbg);border-color:#f0c987;color:var(--warn)}
.banner.bad{background:var(--badbg);border-color:#f1b5b5;color:var(--bad)}
.banner.ok{background:#eaf6ee;border-color:#b5dfc1;color:var(--ok)}
.banner ul{margin:.3rem 0 0;padding-left:1.2rem}
.muted{color:var(--muted)}
.error{color:var(--bad)}
.nottl{color:var(--bad);font-weight:600}
tr.at-limit td{background:var(--badbg)}
tr.at-limit td.headroom{color:var(--bad);font-weight:600}
form.filters{display:flex;gap:.6rem;flex-wrap:wrap;align-items:end;background:var(--bg);padding:.7rem;border-radius:6px}
form.filters label{display:flex;flex-direction:column;font-size:.8rem;color:var(--muted)}
input,select{font:inherit;padding:.25rem .4rem;border:1px solid var(--line);border-radius:4px}
button,.button{font:inherit;padding:.3rem .8rem;border-radius:4px;border:1px solid var(--accent);background:var(--accent);color:#fff;cursor:pointer;text-decoration:none;display:inline-block}
button.danger{background:var(--bad);border-color:var(--bad)}
.pager{display:flex;gap:1rem;align-items:center;margin:.5rem 0}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:.2rem 1rem}
dl.facts dt{color:var(--muted)}
dl.facts dd{margin:0}
.badge{display:inline-block;font-size:.75rem;font-weight:600;padding:.05rem .45rem;border-radius:4px;background:var(--bg);border:1px solid var(--line);color:var(--muted);vertical-align:middle}
";

/// A whole page: `title`, an optional banner above the content, `body`.
pub(super) fn page(base: &Base, title: &str, banner: Option<Markup>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · shardlimit" }
                link rel="stylesheet" href=(base.to("/style.css"));
            }
            body {
                header {
                    span.brand { "shardlimit" }
                    nav {
                        a href=(base.to("/")) { "Overview" }
                        a href=(base.to("/limiters")) { "Limiters" }
                        a href=(base.to("/throttled")) { "Throttled now" }
                        a href=(base.to("/audit")) { "Audit" }
                    }
                    // On every page: straight to one subject's page, which
                    // reads only that subject's slot — or, for a raw API
                    // key, its keyed digest's. Posted, so a typed key is
                    // never in a URL (see find.rs).
                    form.find method="post" action=(base.to("/find")) {
                        input type="search" name="subject" placeholder="Find subject or API key" aria-label="Find subject or API key" required;
                        button type="submit" { "Find" }
                    }
                }
                main {
                    @if let Some(banner) = banner { (banner) }
                    (body)
                }
            }
        }
    }
}
