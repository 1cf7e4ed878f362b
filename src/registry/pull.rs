//! One pull: the tag resolved, then (the digest changed) the manifest and the layers.

use futures::{StreamExt, TryStreamExt};
use reqwest::Method;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::get::{get_blob, get_manifest};
use super::layers::{self, Bounds, Found, Transport};
use super::manifest::{self, ACCEPT, DATA_TYPES, Descriptor, Manifest};
use super::session::{Session, chunks, read_capped};
use super::{Access, Client, PullError, matches, sha256, signature, status_error};
use crate::budget::Hold;
use crate::channel::changelogs::Changelogs;
use crate::config::{OciOptions, Reference};
use crate::fetch::{Response, Validators};

/// How many zstd layers are decoded at once, all pulls together (each decoder holds up to
/// ~25 MiB at the window cap, `layers::MAX_ZSTD_WINDOW`).
const ZSTD_DECODERS_AT_ONCE: usize = 2;
static ZSTD_DECODERS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(ZSTD_DECODERS_AT_ONCE);

/// The most manifests one pull follows (an index, then its image).
const MAX_MANIFESTS: usize = 2;

/// Pulls an oci channel's data. `known`: the revision of the data kept from before (its
/// digest unchanged, nothing is pulled: `NotModified`).
pub async fn pull(
    client: &Client,
    options: &OciOptions,
    access: &Access,
    known: &Validators,
    max_bytes: u64,
    hold: &mut Hold,
) -> Response {
    let image = options.image.to_string();
    let known = known
        .etag
        .as_deref()
        .and_then(|r| r.rsplit('@').next())
        .map(str::to_string);
    let timeout = options.timeout;
    let run = async {
        let http = client
            .with_ca(access.ca_pem.as_deref())
            .map_err(|e| PullError::Bad(format!("caSecretRef: ca.crt {e}")))?;
        let host = options.image.registry.as_str();
        let host = host
            .rsplit_once(':')
            .filter(|(_, port)| port.bytes().all(|b| b.is_ascii_digit()))
            .map_or(host, |(h, _)| h);
        let private = crate::fetch::resolves_private(&client.policy, host).await;
        let mut session = Session::new(
            http,
            &client.policy,
            &options.image,
            options.insecure,
            access.credentials.as_ref(),
            timeout,
        );
        session.private = private;
        let result = run(
            &mut session,
            options,
            access.verify_key.as_deref(),
            known.as_deref(),
            client.max_layer_bytes,
            max_bytes,
            hold,
        )
        .await;
        debug!(
            image,
            requests = session.requests,
            "registry requests of one pull"
        );
        result
    };
    match tokio::time::timeout(timeout, run).await {
        Err(_) => Response::Failed(format!(
            "pulling {image}: timed out after {}",
            crate::duration::format(timeout)
        )),
        Ok(Ok(None)) => Response::NotModified,
        Ok(Ok(Some((data, revision, changelogs)))) => Response::Body {
            data,
            validators: Validators {
                etag: Some(revision),
                last_modified: None,
            },
            changelogs: changelogs.map(std::sync::Arc::new),
        },
        Ok(Err(PullError::Unverified(why))) => {
            Response::Unverified(format!("verifying {image}: {why}"))
        }
        Ok(Err(e)) => Response::Failed(format!("pulling {image}: {e}")),
    }
}

/// The data and its revision; `None`: the digest is `known`.
async fn run(
    session: &mut Session<'_>,
    options: &OciOptions,
    verify_key: Option<&[u8]>,
    known: Option<&str>,
    max_layer_bytes: u64,
    max_bytes: u64,
    hold: &mut Hold,
) -> Result<Option<(Vec<u8>, String, Option<Changelogs>)>, PullError> {
    let image = &options.image;
    let (digest, revision) = match &image.reference {
        Reference::Digest(d) => (Some(d.clone()), d.clone()),
        Reference::Tag(tag) => {
            let digest = resolve(session, tag).await?;
            let revision = digest
                .as_ref()
                .map_or_else(String::new, |d| format!("{tag}@{d}"));
            (digest, revision)
        }
    };
    if let (Some(d), Some(k)) = (&digest, known)
        && d == k
    {
        // Checked again: a signature removed or a key rotated since then refuses the
        // data kept, too.
        if let Some(key) = verify_key {
            signature::verify(session, key, d).await?;
        }
        return Ok(None);
    }
    // No digest in the HEAD answer: the manifest by tag, its digest computed.
    let mut reference = digest.unwrap_or_else(|| image.reference().to_string());
    let mut revision = revision;
    let mut top = None;
    for _ in 0..MAX_MANIFESTS {
        let (body, content_type) = get_manifest(session, &reference).await?;
        let actual = sha256(&body);
        // A reference with a colon is a digest (a tag has none), the top one's or an index
        // entry's: the body is what it names, whichever algorithm it names.
        if reference.contains(':') {
            match matches(&reference, &body) {
                Some(true) => {}
                Some(false) => {
                    return Err(PullError::Bad(format!(
                        "the manifest of {} does not match its digest {reference}",
                        image.repo()
                    )));
                }
                None => return Err(PullError::Bad(unverifiable("a manifest", &reference))),
            }
        }
        if top.is_none()
            && let Some(key) = verify_key
        {
            // Before anything of the image is used: the digest the tag names is signed.
            signature::verify(session, key, &actual).await?;
        }
        if revision.is_empty() {
            revision = format!("{}@{actual}", image.reference());
            if known == Some(actual.as_str()) {
                return Ok(None);
            }
        }
        let top_digest = top.get_or_insert_with(|| actual.clone()).clone();
        let parsed = manifest::parse(&body, content_type.as_deref()).map_err(|why| {
            PullError::Bad(if session.private {
                format!(
                    "the manifest is not an image manifest or index {}",
                    session.shown("")
                )
            } else {
                why
            })
        })?;
        match parsed {
            Manifest::Index(entries) => {
                let chosen = manifest::choose(&entries, &options.platform).ok_or_else(|| {
                    PullError::NoPlatform {
                        platform: options.platform.to_string(),
                        image: format!("{}@{top_digest}", image.repo()),
                        listed: if session.private {
                            session.shown("")
                        } else {
                            manifest::platforms(&entries)
                        },
                    }
                })?;
                reference = chosen.digest.clone();
            }
            Manifest::Image(layers) => {
                let named = format!("{}@{top_digest}", image.repo());
                let (data, changelogs) = read_data(
                    session,
                    options,
                    &layers,
                    &named,
                    max_layer_bytes,
                    max_bytes,
                    hold,
                )
                .await?;
                return Ok(Some((data, revision, changelogs)));
            }
        }
    }
    Err(PullError::Bad(format!(
        "the image index of {} points to another index",
        image.repo()
    )))
}

/// Why a digest of an algorithm this client does not verify is refused.
fn unverifiable(what: &str, digest: &str) -> String {
    format!(
        "{what} has digest {digest}, of an algorithm this client cannot verify (sha256 and sha512 are)"
    )
}

/// The tag's digest, from one `HEAD` (`None`: the registry did not say it).
async fn resolve(session: &mut Session<'_>, tag: &str) -> Result<Option<String>, PullError> {
    let url = session.url("manifests", tag);
    let response = session.send(Method::HEAD, &url, Some(ACCEPT)).await?;
    if !response.status().is_success() {
        return Err(status_error(
            response.status(),
            format!("the manifest of {}", session.image),
            session.repo(),
            Some(session.image.to_string()),
        ));
    }
    Ok(response
        .headers()
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        .filter(|d| d.starts_with("sha256:"))
        .map(str::to_string))
}

/// The data of an image (the file, layers top down) or of an artifact (its JSON layer).
async fn read_data(
    session: &mut Session<'_>,
    options: &OciOptions,
    layers: &[Descriptor],
    named: &str,
    max_layer_bytes: u64,
    max_bytes: u64,
    hold: &mut Hold,
) -> Result<(Vec<u8>, Option<Changelogs>), PullError> {
    if let Some(data) = layers
        .iter()
        .find(|l| DATA_TYPES.contains(&l.media_type.as_str()))
    {
        if data.size > max_bytes {
            return Err(PullError::Bad(format!(
                "the artifact's data is {} bytes, more than {max_bytes} (--max-output-bytes)",
                data.size
            )));
        }
        // Room in the data budget before a byte is read: its size is known.
        grow(hold, data.size).await?;
        let response = get_blob(session, &data.digest).await?;
        let body = read_capped(response, max_bytes, "the artifact's data", session).await?;
        match matches(&data.digest, &body) {
            Some(true) => {}
            Some(false) => {
                return Err(PullError::Bad(format!(
                    "the artifact's data does not match its digest {}",
                    data.digest
                )));
            }
            None => {
                return Err(PullError::Bad(unverifiable(
                    "the artifact's data",
                    &data.digest,
                )));
            }
        }
        // (an artifact is its data: no files beside it)
        return Ok((body, None));
    }
    let path = options.path.clone();
    // The layer search runs in a blocking task, which a timed-out or dropped pull would not
    // stop: this token, cancelled when this future is dropped, ends the body stream the
    // task reads, so the task stops and the connection closes at once.
    let cancel = CancellationToken::new();
    let _cancel_on_drop = cancel.clone().drop_guard();
    let mut bounds = Bounds {
        max_file: max_bytes,
        layer_budget: max_layer_bytes,
        layer_limit: max_layer_bytes,
        changelogs: Some(Changelogs::default()),
    };
    for layer in layers.iter().rev() {
        let compression = manifest::compression(&layer.media_type).ok_or_else(|| {
            PullError::Bad(format!(
                "layer {} has media type {}, which is not a filesystem layer or channel data",
                manifest::word(&layer.digest),
                session.shown(&layer.media_type)
            ))
        })?;
        if layer.size > bounds.layer_budget {
            return Err(layers::LayerError::TooMuch {
                path,
                limit: max_layer_bytes,
            }
            .into());
        }
        // A zstd decoder holds up to ~25 MiB (its window, capped): so many at once, however
        // many syncs pull, that concurrency cannot multiply it; taken before the blob is asked
        // for, so a waiting pull holds no connection. The wait ends with the pull.
        let decoder = match compression {
            manifest::Compression::Zstd => Some(
                ZSTD_DECODERS
                    .acquire()
                    .await
                    .map_err(|_| PullError::Bad("no zstd decoder".into()))?,
            ),
            _ => None,
        };
        let response = get_blob(session, &layer.digest).await?;
        let stream = chunks(response, session).map_err(|e| match e {
            PullError::Transport(text) => std::io::Error::other(Transport(text)),
            other => std::io::Error::other(Transport(other.to_string())),
        });
        let stream = until_cancelled(stream, cancel.clone());
        let blob = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
        let (digest, size, wanted) = (layer.digest.clone(), layer.size, path.clone());
        // The file takes room in the data budget before its bytes are read: the hold goes
        // to the blocking task and comes back with its answer (or, the pull dropped, is
        // given back when the task ends).
        let room = std::sync::Arc::new(std::sync::Mutex::new(Some(std::mem::replace(
            hold,
            hold.budget().hold(),
        ))));
        let (in_task, runtime) = (room.clone(), tokio::runtime::Handle::current());
        let (found, left) = tokio::task::spawn_blocking(move || {
            let _decoder = decoder;
            let mut reserve = |bytes: u64| -> Result<(), String> {
                let mut held = in_task.lock().map_err(|_| "the data budget".to_string())?;
                let Some(hold) = held.as_mut() else {
                    return Ok(());
                };
                let bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
                runtime
                    .block_on(hold.grow(bytes))
                    .map_err(|s| s.to_string())
            };
            let found = layers::search_reserving(
                blob,
                compression,
                &wanted,
                &digest,
                size,
                &mut bounds,
                &mut reserve,
            );
            (found, bounds)
        })
        .await
        .map_err(|e| PullError::Bad(format!("reading a layer failed: {e}")))?;
        if let Some(back) = room.lock().ok().and_then(|mut r| r.take()) {
            *hold = back;
        }
        bounds = left;
        match found? {
            // Its room was taken before it was read (`reserve`).
            Found::File(data) => return Ok((data, bounds.changelogs)),
            Found::Gone => break,
            Found::Absent => {}
        }
    }
    Err(PullError::NoFile {
        path,
        image: named.to_string(),
    })
}

/// Room for `bytes` of channel data in the budget all syncs share (json and oci alike); a
/// budget full for its idle bound fails the pull, as it fails a json fetch.
async fn grow(hold: &mut Hold, bytes: u64) -> Result<(), PullError> {
    hold.grow(usize::try_from(bytes).unwrap_or(usize::MAX))
        .await
        .map_err(|stall| PullError::Bad(stall.to_string()))
}

/// `stream` until `cancel` fires: then one error, and the stream (its connection) is
/// dropped at once, whatever it was waiting for.
fn until_cancelled<S>(
    stream: S,
    cancel: CancellationToken,
) -> futures::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>
where
    S: futures::Stream<Item = std::io::Result<bytes::Bytes>> + Send + Unpin + 'static,
{
    futures::stream::unfold(Some((stream, cancel)), |state| async move {
        let (mut stream, cancel) = state?;
        tokio::select! {
            biased;
            () = cancel.cancelled() => {
                let stopped = Transport("the pull was cancelled (its timeout passed)".into());
                Some((Err(std::io::Error::other(stopped)), None))
            }
            item = stream.next() => item.map(|i| (i, Some((stream, cancel)))),
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests;
