//! The frame of every page, the salvage banner and the error pages.

use maud::{DOCTYPE, Markup, html};

use crate::projections::console::SalvageNotice;

/// How a page follows the data directory (decision D183).
#[derive(Debug, Clone, Copy)]
pub enum Live<'a> {
    /// Polls `url` for the log's version and fetches the page when it changes.
    Version(&'a str, &'a str),
    /// Fetches the page itself now and then.
    Poll,
    /// Never updated in place: the answer to a refused form, whose text must stay.
    Static,
}

/// A whole page: head with the embedded assets, navigation, and `body` inside `<main>`.
pub fn page(title: &str, main_attrs: Option<(&str, &str)>, body: Markup) -> Markup {
    match main_attrs {
        Some((version, url)) => page_live(title, Live::Version(version, url), body),
        None => page_live(title, Live::Poll, body),
    }
}

/// [`page`] with its way of following the data directory spelled out.
pub fn page_live(title: &str, live: Live<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                // Over the `no-referrer` header: a form POST then carries its `Origin` (under
                // `no-referrer` browsers send `Origin: null`), and still nothing leaves the
                // Console's origin (decision D90).
                meta name="referrer" content="same-origin";
                title { (title) " · WorkRail Console" }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body {
                a class="skip" href="#main" { "Skip to content" }
                header {
                    nav id="nav" aria-label="Console" {
                        span class="brand" { "WorkRail Console" }
                        a href="/" { "Sessions" }
                        a href="/workflows" { "Workflows" }
                        a href="/config" { "Config" }
                    }
                }
                @match live {
                    Live::Version(version, url) => main id="main" data-version=(version) data-version-url=(url) { (body) },
                    Live::Poll => main id="main" { (body) },
                    Live::Static => main id="main" data-static { (body) },
                }
            }
        }
    }
}

/// The banner over a session that is not healthy: what is wrong, said once, and how to get it
/// out of the way (`how_to_clear` names `workrail repair` only where repair can help, a missing
/// snapshot pin); the page below shows the validated prefix only.
pub fn salvage_banner(session_id: &str, notice: &SalvageNotice) -> Markup {
    html! {
        div id="salvage-banner" role="alert" data-health=(notice.health) data-reason=(notice.reason) {
            p {
                strong { "Salvage view: " }
                "this session is " code { (notice.health) } " (" code { (notice.reason) } "): "
                (notice.detail)
                @if let Some(i) = notice.manifest_index { " (validation stopped at manifest record " (i) ")" }
                ". Only its validated prefix is shown; it is never used to advance execution."
            }
            p {
                "To recover: " (with_code_spans(&notice.how_to_clear)) ". "
                a class="download" href=(format!("/sessions/{session_id}/export.json")) download { "Download the validated prefix as a bundle" }
                "."
            }
        }
    }
}

/// A text whose `backticked` parts (commands, as the CLI writes them) are shown as code.
fn with_code_spans(text: &str) -> Markup {
    html! {
        @for (i, part) in text.split('`').enumerate() {
            @if i % 2 == 1 { code { (part) } } @else { (part) }
        }
    }
}

/// 403: no or a wrong secret.
pub fn needs_link() -> Markup {
    page(
        "This Console needs its link",
        None,
        html! {
            h1 { "This Console needs its link" }
            p {
                "Open the URL printed by " code { "workrail console" }
                " in the terminal where it runs: it carries a per-launch secret, and this browser has not presented it (or presented an old one)."
            }
        },
    )
}

/// 421: a request addressed to another host name (the Console answers only to
/// `127.0.0.1:<port>` and `localhost:<port>`).
pub fn wrong_host() -> Markup {
    page(
        "Wrong address",
        None,
        html! {
            h1 { "Wrong address" }
            p { "This Console answers only at the address printed by " code { "workrail console" } "." }
        },
    )
}

/// 403: a state-changing request from another origin.
pub fn cross_origin() -> Markup {
    page(
        "Cross-origin request refused",
        None,
        html! {
            h1 { "Cross-origin request refused" }
            p { "Requests that change anything must come from the Console's own pages." }
        },
    )
}

/// 404 for a path, or for a session or node that does not exist.
pub fn not_found(what: &str) -> Markup {
    page(
        "Not found",
        None,
        html! {
            h1 { "Not found" }
            p { (what) }
            p { a href="/" { "Back to the sessions" } }
        },
    )
}

/// 500: the data directory could not be read.
pub fn unreadable(detail: &str) -> Markup {
    page(
        "Cannot read the data directory",
        None,
        html! {
            h1 { "Cannot read the data directory" }
            p { (detail) }
            p { a href="/" { "Back to the sessions" } }
        },
    )
}
