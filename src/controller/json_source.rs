//! json channels: the fetch, and the last good body of each channel, kept in its record for
//! conditional requests (a `304 Not Modified` is answered from it, so the versions are still
//! compared and repaired). The kept bodies are bounded in total bytes and go with their
//! channel's record.

use super::Context;
use super::io::ChannelIo;
use super::queue::Key;
use super::record::Body;
use crate::config::JsonOptions;
use crate::fetch::Response;
use crate::syncer::Fetched;

impl<I: ChannelIo> Context<I> {
    /// Fetches a json channel's data; a 304 is answered from the last good body.
    pub(super) async fn fetch(
        &self,
        key: &Key,
        uid: &str,
        options: &JsonOptions,
        hold: &mut crate::budget::Hold,
    ) -> Fetched {
        let kept = self
            .memory
            .lock()
            .ok()
            .and_then(|mut m| m.body(key, uid, &options.uri));
        let validators = kept
            .as_ref()
            .map(|b| b.validators.clone())
            .unwrap_or_default();
        let max = self.settings.max_output_bytes;
        match self.io.fetch(options, &validators, max, hold).await {
            Response::Body { data, validators } => Fetched::Body {
                data: data.into(),
                validators,
                not_modified: false,
            },
            Response::NotModified => match kept {
                Some(body) => Fetched::Body {
                    data: body.data,
                    validators: body.validators,
                    not_modified: true,
                },
                None => Fetched::Failed(format!(
                    "fetching {}: the server answered 304 Not Modified to a request without validators",
                    options.uri
                )),
            },
            Response::Failed(why) => Fetched::Failed(why),
        }
    }

    /// Keeps the body a successful sync used, for the next conditional request.
    pub(super) fn remember_body(
        &self,
        key: &Key,
        uid: &str,
        options: &JsonOptions,
        fetched: &Fetched,
    ) {
        let Fetched::Body {
            data,
            validators,
            not_modified: false,
        } = fetched
        else {
            return;
        };
        let validators = validators.clone();
        let body = (!validators.is_empty()).then(|| Body {
            uri: options.uri.clone(),
            validators,
            data: data.clone(),
        });
        if let Ok(mut memory) = self.memory.lock() {
            memory.keep_body(key, uid, body);
        }
    }
}
