//! Signing as cosign signs, for `mirror --sign-key`: a simple-signing payload naming the
//! digest, its ECDSA P-256 signature, and the signature image stored under
//! `sha256-<hex>.sig`, in the format [`super::signature_layers`] and [`super::check`] read
//! (one statement of the format for both directions).
//!
//! The key is a PKCS#8 PEM private key (`openssl genpkey -algorithm EC -pkeyopt
//! ec_paramgen_curve:P-256`); cosign's own password-encrypted key file is not read.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::json;

use super::{P256_SPKI_PREFIX, PAYLOAD_MEDIA_TYPE, PAYLOAD_TYPE, SIGNATURE_ANNOTATION};

/// The signature image's media type (written here, not taken from `registry`, which
/// depends on this module to verify).
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn sha256(data: &[u8]) -> String {
    let hash = ring::digest::digest(&ring::digest::SHA256, data);
    let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

pub struct SigningKey(EcdsaKeyPair);

impl SigningKey {
    pub fn from_pem(text: &str) -> Result<Self, String> {
        let wrong = "--sign-key: not a PEM \"PRIVATE KEY\" (PKCS#8) of an ECDSA P-256 key; make one with `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256` (cosign's encrypted key files are not read)";
        let block = pem::parse(text.trim()).map_err(|_| wrong.to_string())?;
        if block.tag() != "PRIVATE KEY" {
            return Err(wrong.into());
        }
        EcdsaKeyPair::from_pkcs8(
            &ECDSA_P256_SHA256_ASN1_SIGNING,
            block.contents(),
            &SystemRandom::new(),
        )
        .map(SigningKey)
        .map_err(|_| wrong.into())
    }

    /// The public key as `cosign.pub` holds it (PEM `PUBLIC KEY`, SubjectPublicKeyInfo).
    pub fn public_pem(&self) -> String {
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(self.0.public_key().as_ref());
        pem::encode(&pem::Pem::new("PUBLIC KEY", spki))
    }

    /// The signature image of `digest` (of the image `reference`, `registry/repo`): its
    /// config, its one payload layer, and its manifest.
    pub fn sign(&self, reference: &str, digest: &str) -> Result<Signed, String> {
        let payload = json!({
            "critical": {
                "identity": {"docker-reference": reference},
                "image": {"docker-manifest-digest": digest},
                "type": PAYLOAD_TYPE,
            },
            "optional": null,
        })
        .to_string()
        .into_bytes();
        let signature = self
            .0
            .sign(&SystemRandom::new(), &payload)
            .map_err(|_| "signing failed".to_string())?;
        let signature = STANDARD.encode(signature.as_ref());
        let payload_digest = sha256(&payload);
        let config = json!({
            "architecture": "", "os": "", "config": {},
            "rootfs": {"type": "layers", "diff_ids": [payload_digest]},
        })
        .to_string()
        .into_bytes();
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha256(&config), "size": config.len()},
            "layers": [{"mediaType": PAYLOAD_MEDIA_TYPE, "digest": payload_digest,
                "size": payload.len(), "annotations": {SIGNATURE_ANNOTATION: signature}}],
        })
        .to_string()
        .into_bytes();
        Ok(Signed {
            config,
            payload,
            manifest,
        })
    }
}

pub struct Signed {
    pub config: Vec<u8>,
    pub payload: Vec<u8>,
    pub manifest: Vec<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_signed_verifies_with_the_public_key_as_the_operator_checks_it() {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let pem_text = pem::encode(&pem::Pem::new("PRIVATE KEY", pkcs8.as_ref().to_vec()));
        let key = SigningKey::from_pem(&pem_text).unwrap();
        let digest = format!("sha256:{}", "ab".repeat(32));
        let signed = key.sign("site.lan/os/channel", &digest).unwrap();
        let layers = super::super::signature_layers(&signed.manifest, &digest).unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0].payload_digest, sha256(&signed.payload));
        let public = super::super::PublicKey::from_pem(&key.public_pem()).unwrap();
        super::super::check(&public, &digest, &signed.payload, &layers[0].signature).unwrap();
        let other = format!("sha256:{}", "cd".repeat(32));
        assert!(
            super::super::check(&public, &other, &signed.payload, &layers[0].signature).is_err()
        );
    }

    #[test]
    fn a_key_that_is_not_a_pkcs8_p256_key_is_refused_with_how_to_make_one() {
        for text in [
            "",
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----",
            "not pem",
        ] {
            let e = SigningKey::from_pem(text).err().unwrap();
            assert!(e.contains("openssl genpkey"), "{e}");
        }
    }
}
