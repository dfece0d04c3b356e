//! Notes as HTML: Markdown rendered with raw HTML turned into text, then sanitized, so no markup
//! from durable data reaches the page as markup.

use pulldown_cmark::{Event, Options, Parser, html};

use crate::projections::console::{NOTES_MAX_BYTES, bounded};

/// Sanitized HTML for a Markdown text, at most about [`NOTES_MAX_BYTES`]: HTML longer than that
/// is cut with the canonical truncation marker before it is sanitized, which closes whatever
/// the cut left open.
pub fn to_safe_html(markdown: &str) -> String {
    let parser = Parser::new_ext(
        markdown,
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS,
    )
    .map(|event| match event {
        // Raw HTML is shown as the text it is, never passed through.
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        other => other,
    });
    let mut out = String::new();
    html::push_html(&mut out, parser);
    ammonia::Builder::default()
        .link_rel(Some("noopener noreferrer nofollow"))
        .clean(&bounded(&out, NOTES_MAX_BYTES))
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_html_never_passes_through() {
        let html =
            to_safe_html("# Title\n\n<script>alert(1)</script>\n\nok <img src=x onerror=alert(1)>");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        let link = to_safe_html("[x](javascript:alert(1))");
        assert!(!link.contains("javascript:"), "{link}");
        let long = to_safe_html(&"- **item** `code`\n".repeat(10_000));
        assert!(long.len() < NOTES_MAX_BYTES + 1024, "{}", long.len());
        assert!(long.contains("[TRUNCATED]"));
    }
}
