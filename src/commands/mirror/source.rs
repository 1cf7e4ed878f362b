//! Reading the channel itself from SOURCE: a file, a json URL, an oci channel (with the
//! registry client the oci channel type uses), or the channel entry of a layout.

use std::path::Path;
use std::time::Duration;

use crate::commands::mirror::MAX_DATA_BYTES;
use crate::commands::mirror::layout::Layout;
use crate::commands::mirror::plan::Source;
use crate::commands::mirror::registries::Registries;
use crate::commands::mirror::store::Store;
use crate::config::ImageRef;
use crate::registry;
use crate::registry::manifest::MAX_MANIFEST_BYTES;

/// Reads the channel data; from a layout, also the name it was stored under. `verify_key`:
/// an oci channel's digest must be signed by it (checked before its data is read); a file
/// or URL, which carries no signature, is refused.
pub(super) async fn read_channel(
    source: &Source,
    src: &Store<'_>,
    registries: &Registries,
    timeout: Duration,
    verify_key: Option<&Path>,
) -> Result<(Vec<u8>, Option<String>, Option<String>), String> {
    if let (Source::File(_) | Source::Url(_), Some(_)) = (source, verify_key) {
        return Err("--verify-key: a channel file or URL carries no signature; verify an oci channel (registry/repo:tag) or a dir: bundle made from one".into());
    }
    match source {
        Source::File(p) => {
            let data = std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            if data.len() as u64 > MAX_DATA_BYTES {
                return Err(format!(
                    "{} is more than {MAX_DATA_BYTES} bytes",
                    p.display()
                ));
            }
            Ok((data, None, None))
        }
        Source::Url(u) => {
            let client =
                crate::fetch::Client::new(crate::egress::Policy::new(Vec::new(), Vec::new()))
                    .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
            let options = crate::config::JsonOptions {
                uri: u.clone(),
                timeout,
            };
            let mut hold = crate::budget::Budget::new(MAX_DATA_BYTES, crate::budget::IDLE).hold();
            match crate::fetch::get(
                &client,
                &options,
                &Default::default(),
                MAX_DATA_BYTES,
                &mut hold,
            )
            .await
            {
                crate::fetch::Response::Body { data, .. } => Ok((data, None, None)),
                crate::fetch::Response::Failed(e) | crate::fetch::Response::Unverified(e) => Err(e),
                crate::fetch::Response::NotModified => Err(format!("fetching {u}: no data")),
            }
        }
        Source::Oci(image) => {
            let parsed = ImageRef::parse(image)?;
            let options = crate::commands::validate::image::ImageOptions {
                path: None,
                platform: None,
                insecure: registries.is_insecure(&parsed.registry),
                ca_file: registries.ca_file.clone(),
                key_file: verify_key.map(Path::to_path_buf),
                timeout,
                max_output_bytes: MAX_DATA_BYTES,
                max_layer_bytes: 512 << 20,
            };
            crate::commands::validate::image::pull_with(image, &options, registries.configs.clone())
                .await
                .map(|(name, data)| {
                    // (`repo@sha256:<64 hex>:path`: the digest of what was read)
                    let digest = name
                        .split_once('@')
                        .and_then(|(_, rest)| rest.get(..71))
                        .map(str::to_string);
                    (data, None, digest)
                })
        }
        Source::Dir(d) => {
            let Store::Dir(l) = src else {
                return Err("internal: a layout source without its layout".into());
            };
            let (name, digest) = l.channel().await?.ok_or_else(|| {
                format!(
                    "{} holds no channel (no entry marked by an earlier mirror)",
                    d.display()
                )
            })?;
            let manifest = "the channel's manifest";
            let body = checked(l, d, &digest, MAX_MANIFEST_BYTES, manifest).await?;
            let layers = match registry::manifest::parse(&body, None) {
                Ok(registry::manifest::Manifest::Image(layers)) => layers,
                Ok(registry::manifest::Manifest::Index(_)) => Vec::new(),
                Err(e) => return Err(format!("the channel's manifest: {e}")),
            };
            let layer = layers
                .into_iter()
                .next()
                .ok_or("the channel's manifest names no layer")?
                .digest;
            let data = checked(l, d, &layer, MAX_DATA_BYTES, "the channel data").await?;
            Ok((data, Some(name), None))
        }
    }
}

/// `what`, by `digest`, from the layout `l` in `dir` (at most `max` bytes): it must be
/// there, and be what its digest names.
async fn checked(
    l: &Layout,
    dir: &Path,
    digest: &str,
    max: u64,
    what: &str,
) -> Result<Vec<u8>, String> {
    let body = l
        .manifest(digest, max)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("{} lacks {what} {digest}", dir.display()))?;
    if registry::matches(digest, &body) != Some(true) {
        return Err(format!(
            "{what} in {} is not what its digest names",
            dir.display()
        ));
    }
    Ok(body)
}
