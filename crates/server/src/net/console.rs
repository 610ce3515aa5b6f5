//! The browser console: one page and its assets, embedded in the binary
//! from `crates/server/console/` and served at `GET /` and
//! `GET /console/{file}`.
//!
//! The page is plain JavaScript over the public HTTP API only (no route
//! of its own beyond these files), so it is also that API's example;
//! `app.js` opens with how it is built and what it exposes to tests.
//! uPlot (MIT, its licence beside it) draws the charts and their bands.
//! Nothing is fetched from elsewhere: the console works offline, and no
//! Node build step stands between a checkout and the binary.
//!
//! The files need no token (the page must load before it can ask for
//! one; they hold no data) and are answered with `Cache-Control:
//! no-cache` and an `ETag` of their bytes, so a new binary's page is
//! never served stale and an unchanged one costs a `304`. The content
//! security policy allows the page's own scripts and styles and nothing
//! else: no inline script, no other origin, no framing.

use std::collections::HashMap;
use std::sync::LazyLock;

use axum::extract::{Path, Query};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

/// The page, served at `/`.
const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    bytes: include_bytes!("../../console/index.html"),
};

/// The files under `/console/`, by name.
const ASSETS: [Asset; 5] = [
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../console/app.js"),
    },
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../console/console.css"),
    },
    Asset {
        name: "uPlot.iife.min.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../console/uPlot.iife.min.js"),
    },
    Asset {
        name: "uPlot.min.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../console/uPlot.min.css"),
    },
    Asset {
        name: "LICENSE-uPlot",
        content_type: "text/plain; charset=utf-8",
        bytes: include_bytes!("../../console/LICENSE-uPlot"),
    },
];

/// The page's content security policy: its own files only (uPlot sets
/// element styles, which `style-src 'self'` does not govern); images
/// from `data:` for the favicon.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; base-uri 'none'; \
                      form-action 'none'; frame-ancestors 'none'";

/// Each file's `ETag`: a hash of its bytes (FNV-1a, 64 bits), quoted.
static ETAGS: LazyLock<HashMap<&'static str, String>> = LazyLock::new(|| {
    std::iter::once(&INDEX)
        .chain(ASSETS.iter())
        .map(|asset| {
            let hash = asset.bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
            });
            (asset.name, format!("\"{hash:016x}\""))
        })
        .collect()
});

/// `GET /`: the page.
pub async fn index(headers: HeaderMap, Query(params): Query<HashMap<String, String>>) -> Response {
    if let Err(refused) = super::http::known_params(&params, &[]) {
        return refused;
    }
    serve(&INDEX, &headers)
}

/// `GET /console/{file}`: one of the page's files; `404` for any other
/// name (nothing from the request becomes a path: the name is looked up
/// among the embedded ones).
pub async fn asset(
    Path(file): Path<String>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    if let Err(refused) = super::http::known_params(&params, &[]) {
        return refused;
    }
    match ASSETS.iter().find(|asset| asset.name == file) {
        Some(asset) => serve(asset, &headers),
        None => (
            StatusCode::NOT_FOUND,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            format!("no console file {file:?}"),
        )
            .into_response(),
    }
}

/// The file, or `304` when the client holds these bytes already.
fn serve(asset: &Asset, headers: &HeaderMap) -> Response {
    let etag = &ETAGS[asset.name];
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.content_type)], asset.bytes).into_response()
    };
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::ETAG,
        HeaderValue::from_str(etag).expect("a quoted hex hash is a header value"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if asset.name == INDEX.name {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(POLICY),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_only_embedded_files() {
        let page = std::str::from_utf8(INDEX.bytes).expect("UTF-8");
        let mut named = 0;
        for part in page.split("/console/").skip(1) {
            let name: String = part
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || ".-_".contains(*c))
                .collect();
            assert!(
                ASSETS.iter().any(|a| a.name == name),
                "index.html refers to /console/{name}, which is not embedded"
            );
            named += 1;
        }
        assert!(
            named >= 4,
            "the page loads its script, uPlot and both styles"
        );
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "no other origin"
        );
    }

    #[test]
    fn etags_differ_by_content() {
        let tags: std::collections::HashSet<_> = ETAGS.values().collect();
        assert_eq!(tags.len(), ASSETS.len() + 1);
    }
}
