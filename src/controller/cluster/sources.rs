//! json fetches and oci pulls, the sources the operator reads itself.

use crate::config::{JsonOptions, OciOptions};
use crate::controller::io::SourceIo;
use crate::fetch::{self, Response, Validators};

use super::KubeIo;

impl SourceIo for KubeIo {
    async fn fetch(
        &self,
        options: &JsonOptions,
        validators: &Validators,
        max: u64,
        hold: &mut crate::budget::Hold,
    ) -> Response {
        fetch::get(&self.http, options, validators, max, hold).await
    }

    /// The Secrets are read fresh (no cache of Secrets is kept), one request each.
    async fn pull(
        &self,
        namespace: &str,
        options: &OciOptions,
        known: &Validators,
        max: u64,
        hold: &mut crate::budget::Hold,
    ) -> Response {
        let secrets = self.api(namespace);
        match crate::registry::secrets::access(&secrets, options).await {
            Ok(access) => {
                crate::registry::pull(&self.registry, options, &access, known, max, hold).await
            }
            Err(why) => Response::Failed(format!("pulling {}: {why}", options.image)),
        }
    }
}
