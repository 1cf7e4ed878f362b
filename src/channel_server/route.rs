//! What the channel server answers to a request: pure, from the [`Store`] alone.
//!
//! | path | answer |
//! |---|---|
//! | `/v1/channels` | the index: each served channel, its URL, count, ETag and latest tag |
//! | `/v1/channels/NS/NAME` | its published versions as channel data; ETag, `304` on `If-None-Match` |
//! | `/v1/channels/NS/NAME/latest[?platform=os/arch]` | `302`, `Location: .../tags/<tag>` of the newest version with an image tag |
//! | `/v1/channels/NS/NAME/tags/TAG` | the published versions whose image has that tag, as channel data |

use serde_json::json;

use super::{Served, Store};

const PREFIX: &str = "/v1/channels";
const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

/// A request as the server reads it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
}

/// An answer: status, headers, body.
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: bytes::Bytes,
}

impl Answer {
    fn text(status: u16, text: String) -> Answer {
        Answer {
            status,
            headers: vec![("content-type", TEXT.into())],
            body: format!("{text}\n").into(),
        }
    }

    fn json(body: impl Into<bytes::Bytes>) -> Answer {
        Answer {
            status: 200,
            headers: vec![("content-type", JSON.into())],
            body: body.into(),
        }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What a path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route<'a> {
    Index,
    Channel(&'a str, &'a str),
    Latest(&'a str, &'a str),
    Tag(&'a str, &'a str, &'a str),
    Unknown,
}

pub fn route(path: &str) -> Route<'_> {
    let Some(rest) = path.strip_prefix(PREFIX) else {
        return Route::Unknown;
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Route::Index;
    }
    let Some(rest) = rest.strip_prefix('/') else {
        return Route::Unknown;
    };
    let parts: Vec<&str> = rest.split('/').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Route::Unknown;
    }
    match parts.as_slice() {
        [ns, name] => Route::Channel(ns, name),
        [ns, name, "latest"] => Route::Latest(ns, name),
        [ns, name, "tags", tag] => Route::Tag(ns, name, tag),
        _ => Route::Unknown,
    }
}

/// The answer to `request` from what `store` holds.
pub fn answer(store: &Store, request: Request<'_>) -> Answer {
    if !matches!(request.method, "GET" | "HEAD") {
        let mut a = Answer::text(405, "the channel server is read-only: GET or HEAD".into());
        a.headers.push(("allow", "GET, HEAD".into()));
        return a;
    }
    if !store.active() {
        let mut a = Answer::text(
            503,
            "this replica serves no channels: it does not hold the leader Lease; retry".into(),
        );
        a.headers.push(("retry-after", "10".into()));
        return a;
    }
    let route = route(request.path);
    let (ns, name) = match route {
        Route::Index => return index(store),
        Route::Channel(ns, name) | Route::Latest(ns, name) | Route::Tag(ns, name, _) => (ns, name),
        Route::Unknown => {
            return Answer::text(
                404,
                format!("no such path; the channels served are listed at {PREFIX}"),
            );
        }
    };
    let entry = match store.get(&(ns.to_string(), name.to_string())) {
        Some(Served::Data(entry)) => entry,
        Some(Served::TooLarge(reason)) => return Answer::text(503, reason),
        None => {
            return Answer::text(
                404,
                format!(
                    "channel {ns}/{name} is not served here (it does not set spec.serve: true, or it has not been published since the operator started)"
                ),
            );
        }
    };
    match route {
        Route::Latest(..) => latest(&entry, ns, name, platform(request.query).as_deref()),
        Route::Tag(_, _, tag) => match entry.tagged(tag) {
            Some(body) => Answer::json(body),
            None => Answer::text(
                404,
                format!("channel {ns}/{name} publishes no version whose image has the tag {tag}"),
            ),
        },
        _ => {
            let mut a = if super::not_modified(request.if_none_match, &entry.etag) {
                Answer {
                    status: 304,
                    headers: Vec::new(),
                    body: bytes::Bytes::new(),
                }
            } else {
                Answer::json(entry.body.clone())
            };
            a.headers.push(("etag", entry.etag.clone()));
            a.headers.push(("cache-control", "no-cache".into()));
            a
        }
    }
}

fn latest(entry: &super::Entry, ns: &str, name: &str, platform: Option<&str>) -> Answer {
    let on = platform.map(|p| format!(" for {p}")).unwrap_or_default();
    match entry.latest(platform) {
        Err(super::BadPlatform) => Answer::text(
            400,
            format!(
                "platform {:?} is not os/arch, like linux/amd64",
                platform.unwrap_or_default()
            ),
        ),
        Ok(None) => Answer::text(
            404,
            format!("channel {ns}/{name} publishes no container version with an image tag{on}"),
        ),
        Ok(Some(item)) => {
            let tag = item.tag.as_deref().unwrap_or_default();
            Answer {
                status: 302,
                headers: vec![
                    ("location", format!("{PREFIX}/{ns}/{name}/tags/{tag}")),
                    ("content-type", TEXT.into()),
                    ("cache-control", "no-cache".into()),
                ],
                body: format!("{tag}\n").into(),
            }
        }
    }
}

fn index(store: &Store) -> Answer {
    let list: Vec<serde_json::Value> = store
        .list()
        .into_iter()
        .map(|((ns, name), served)| {
            let url = format!("{PREFIX}/{ns}/{name}");
            match served {
                Served::Data(entry) => json!({
                    "namespace": ns,
                    "name": name,
                    "url": url,
                    "versions": entry.items.len(),
                    "etag": entry.etag,
                    "latest": entry.latest(None).ok().flatten().and_then(|i| i.tag.clone()),
                }),
                Served::TooLarge(reason) => json!({
                    "namespace": ns, "name": name, "url": url, "error": reason,
                }),
            }
        })
        .collect();
    Answer::json(serde_json::to_vec(&list).unwrap_or_else(|_| b"[]".to_vec()))
}

/// The `platform` parameter of a query, percent-decoded (`linux%2Famd64`).
fn platform(query: Option<&str>) -> Option<String> {
    query?
        .split('&')
        .find_map(|pair| pair.strip_prefix("platform="))
        .map(percent_decoded)
}

fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i.saturating_add(1)..i.saturating_add(3))
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i = i.saturating_add(3);
            }
            (b'+', _) => {
                out.push(b' ');
                i = i.saturating_add(1);
            }
            _ => {
                out.push(b);
                i = i.saturating_add(1);
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
