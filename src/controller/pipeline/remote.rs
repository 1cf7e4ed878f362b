//! json and oci channels: the fetch (or pull), and the last good data of each channel, kept
//! in its record for conditional requests (a `304 Not Modified`, or an unchanged image
//! digest, is answered from it, so the versions are still compared and repaired). The kept
//! data is bounded in total bytes and goes with its channel's record.

use crate::config::{JsonOptions, OciOptions};
use crate::controller::Context;
use crate::controller::Key;
use crate::controller::io::ChannelIo;
use crate::controller::records::Body;
use crate::fetch::Response;
use crate::syncer::Fetched;

/// Where a channel's data comes from, when the operator reads it itself.
pub enum Remote<'a> {
    Json(&'a JsonOptions),
    Oci(&'a OciOptions),
}

impl Remote<'_> {
    /// What the kept data stands for: another URI, image, file or platform reads anew.
    pub fn key(&self) -> String {
        match self {
            Remote::Json(o) => o.uri.clone(),
            Remote::Oci(o) => format!("oci {} {} {}", o.image, o.path, o.platform),
        }
    }

    fn unexplained_not_modified(&self) -> String {
        match self {
            Remote::Json(o) => format!(
                "fetching {}: the server answered 304 Not Modified to a request without validators",
                o.uri
            ),
            Remote::Oci(o) => format!("pulling {}: unchanged, but no data is kept", o.image),
        }
    }
}

impl<I: ChannelIo> Context<I> {
    /// Reads a channel's data; "not modified" is answered from the last good data. Both a
    /// json body and an oci pull's data take room in the data budget (`budget`) that all
    /// syncs share: a json body as it arrives, an oci file before it is read.
    pub(in crate::controller) async fn fetch(
        &self,
        key: &Key,
        uid: &str,
        remote: &Remote<'_>,
        hold: &mut crate::budget::Hold,
    ) -> Fetched {
        let source = remote.key();
        let kept = self
            .memory
            .lock()
            .ok()
            .and_then(|mut m| m.body(key, uid, &source));
        let validators = kept
            .as_ref()
            .map(|b| b.validators.clone())
            .unwrap_or_default();
        let max = self.settings.max_output_bytes;
        let response = match remote {
            Remote::Json(options) => self.io.fetch(options, &validators, max, hold).await,
            Remote::Oci(options) => {
                let ns = key.namespace.as_deref().unwrap_or_default();
                self.io.pull(ns, options, &validators, max, hold).await
            }
        };
        match response {
            Response::Body {
                data,
                validators,
                changelogs,
            } => Fetched::Body {
                data: data.into(),
                validators,
                not_modified: false,
                changelogs,
            },
            Response::NotModified => match kept {
                Some(body) => Fetched::Body {
                    data: body.data,
                    validators: body.validators,
                    not_modified: true,
                    changelogs: None,
                },
                None => Fetched::Failed(remote.unexplained_not_modified()),
            },
            Response::Failed(why) => Fetched::Failed(why),
            Response::Unverified(why) => Fetched::Unverified(why),
        }
    }

    /// Keeps the data a successful sync used, for the next conditional request.
    pub(in crate::controller) fn remember_body(
        &self,
        key: &Key,
        uid: &str,
        source: &str,
        fetched: &Fetched,
    ) {
        let Fetched::Body {
            data,
            validators,
            not_modified: false,
            ..
        } = fetched
        else {
            return;
        };
        let validators = validators.clone();
        let body = (!validators.is_empty()).then(|| Body {
            uri: source.to_string(),
            validators,
            data: data.clone(),
        });
        if let Ok(mut memory) = self.memory.lock() {
            memory.keep_body(key, uid, body);
        }
    }
}
