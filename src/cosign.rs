//! cosign signatures, checked without cosign: the signature of an image digest is stored
//! in the same repository under the tag `sha256-<hex>.sig`, an image whose layers are
//! "simple signing" payloads (JSON naming the signed digest) with the base64 ECDSA
//! signature of each payload in the layer annotation `dev.cosignproject.cosign/signature`.
//! A digest is verified when one layer's payload names it and its signature verifies
//! against the channel's public key (`cosign.pub`, ECDSA P-256, as `cosign generate-key-pair`
//! writes it). Transparency-log and certificate (keyless) checks are not made: a key pair is
//! the trust root.
//!
//! What the registry (or a layout directory) returned goes in, a verdict comes out; fetching
//! is the caller's ([`verify_image`] asks it for each payload).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ring::signature::{ECDSA_P256_SHA256_ASN1, UnparsedPublicKey};
use serde::Deserialize;

pub mod sign;

/// The layer annotation holding a payload's signature.
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The media type of a simple-signing payload layer.
const PAYLOAD_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The payload type cosign writes.
const PAYLOAD_TYPE: &str = "cosign container image signature";
/// SubjectPublicKeyInfo of an EC key on P-256, up to the key's point (RFC 5480): what every
/// `cosign.pub` starts with.
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
/// The most signature layers looked at (a signature image holds one per signing).
const MAX_SIGNATURES: usize = 32;
/// The most bytes of a payload (cosign's are a few hundred).
pub const MAX_PAYLOAD_BYTES: u64 = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error(
        "the public key is not a PEM \"PUBLIC KEY\" of an ECDSA P-256 key (as cosign generate-key-pair writes cosign.pub)"
    )]
    BadKey,
    #[error("{0} is not a sha256 digest")]
    BadDigest(String),
    #[error("no cosign signature for {0} (no tag {1} in the repository)")]
    Unsigned(String, String),
    #[error("the signature image of {0} is not a cosign signature manifest")]
    BadManifest(String),
    #[error("no signature of {digest} verifies against the key ({why})")]
    Invalid { digest: String, why: String },
}

/// A channel's verification key.
pub struct PublicKey(UnparsedPublicKey<Vec<u8>>);

impl PublicKey {
    /// From the PEM text of `cosign.pub`.
    pub fn from_pem(text: &str) -> Result<Self, VerifyError> {
        let block = pem::parse(text.trim()).map_err(|_| VerifyError::BadKey)?;
        if block.tag() != "PUBLIC KEY" {
            return Err(VerifyError::BadKey);
        }
        let point = block
            .contents()
            .strip_prefix(&P256_SPKI_PREFIX[..])
            .filter(|p| p.len() == 65 && p.first() == Some(&0x04))
            .ok_or(VerifyError::BadKey)?;
        Ok(PublicKey(UnparsedPublicKey::new(
            &ECDSA_P256_SHA256_ASN1,
            point.to_vec(),
        )))
    }
}

/// The tag cosign stores the signature of `digest` under: `sha256-<hex>.sig`.
pub fn signature_tag(digest: &str) -> Result<String, VerifyError> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| VerifyError::BadDigest(digest.to_string()))?;
    Ok(crate::digest::DigestTag::Signature.of(digest))
}

/// One signature layer of the signature image: which blob holds the payload, and the
/// signature the annotation gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureLayer {
    pub payload_digest: String,
    pub payload_size: u64,
    pub signature: String,
}

#[derive(Deserialize)]
struct Manifest {
    #[serde(default)]
    layers: Vec<Layer>,
}

#[derive(Deserialize)]
struct Layer {
    #[serde(default, rename = "mediaType")]
    media_type: String,
    digest: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
}

/// The signature layers of a signature image's manifest (at most [`MAX_SIGNATURES`]).
pub fn signature_layers(manifest: &[u8], digest: &str) -> Result<Vec<SignatureLayer>, VerifyError> {
    let bad = || VerifyError::BadManifest(digest.to_string());
    let manifest: Manifest = serde_json::from_slice(manifest).map_err(|_| bad())?;
    let layers: Vec<SignatureLayer> = manifest
        .layers
        .into_iter()
        .filter(|l| l.media_type == PAYLOAD_MEDIA_TYPE)
        .filter_map(|l| {
            let signature = l.annotations.get(SIGNATURE_ANNOTATION)?.clone();
            Some(SignatureLayer {
                payload_digest: l.digest,
                payload_size: l.size,
                signature,
            })
        })
        .take(MAX_SIGNATURES)
        .collect();
    if layers.is_empty() {
        return Err(bad());
    }
    Ok(layers)
}

#[derive(Deserialize)]
struct Payload {
    critical: Critical,
}

#[derive(Deserialize)]
struct Critical {
    image: PayloadImage,
    #[serde(rename = "type")]
    type_: String,
}

#[derive(Deserialize)]
struct PayloadImage {
    #[serde(rename = "docker-manifest-digest")]
    digest: String,
}

/// Whether one payload names `digest` and its signature (base64 DER) verifies: `Ok` or why
/// not.
pub fn check(key: &PublicKey, digest: &str, payload: &[u8], signature: &str) -> Result<(), String> {
    let signature = STANDARD
        .decode(signature.trim())
        .map_err(|_| "a signature is not base64".to_string())?;
    key.0
        .verify(payload, &signature)
        .map_err(|_| "a signature does not match the key".to_string())?;
    // Only a payload the key signed is read: what it says is the signer's word.
    let payload: Payload = serde_json::from_slice(payload)
        .map_err(|_| "a signed payload is not a simple-signing payload".to_string())?;
    if payload.critical.type_ != PAYLOAD_TYPE {
        return Err(format!(
            "a signed payload has type {:?}",
            crate::text::head(&payload.critical.type_, 80)
        ));
    }
    if !payload.critical.image.digest.eq_ignore_ascii_case(digest) {
        return Err(format!(
            "a valid signature is of another digest, {}",
            crate::text::head(&payload.critical.image.digest, 80)
        ));
    }
    Ok(())
}

/// The verdict over every signature layer: verified when one of them checks.
pub fn verify(
    key: &PublicKey,
    digest: &str,
    signed: &[(Vec<u8>, String)],
) -> Result<(), VerifyError> {
    let mut why = Vec::new();
    for (payload, signature) in signed {
        match check(key, digest, payload, signature) {
            Ok(()) => return Ok(()),
            Err(e) => why.push(e),
        }
    }
    why.dedup();
    Err(VerifyError::Invalid {
        digest: digest.to_string(),
        why: crate::text::list(&why, "; "),
    })
}

/// The layers of the signature image of `digest` whose payloads are to be read
/// (`manifest`: what its [`signature_tag`] holds, `None` when there is no such tag; `image`
/// names it in errors): at most [`MAX_SIGNATURES`], each payload at most
/// [`MAX_PAYLOAD_BYTES`]. Then [`verify_read`]: one check for every place a signature is
/// read from (`spec.verify` from a registry, `mirror --verify-key` from a registry or a
/// layout directory).
pub fn to_read(
    digest: &str,
    image: &str,
    manifest: Option<&[u8]>,
) -> Result<Vec<SignatureLayer>, VerifyError> {
    let tag = signature_tag(digest)?;
    let manifest = manifest.ok_or_else(|| VerifyError::Unsigned(image.to_string(), tag))?;
    let mut layers = signature_layers(manifest, image)?;
    layers.retain(|l| l.payload_size <= MAX_PAYLOAD_BYTES);
    Ok(layers)
}

/// The verdict over the payloads read for [`to_read`]'s layers: a payload that is not the
/// blob its layer names is not what was signed, and is left out; then [`verify`].
pub fn verify_read(
    key: &PublicKey,
    digest: &str,
    read: Vec<(SignatureLayer, Vec<u8>)>,
) -> Result<(), VerifyError> {
    let signed: Vec<(Vec<u8>, String)> = read
        .into_iter()
        .filter(|(l, body)| crate::digest::matches(&l.payload_digest, body) == Some(true))
        .map(|(l, body)| (body, l.signature))
        .collect();
    verify(key, digest, &signed)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Made with openssl as cosign makes them: a P-256 key, a simple-signing payload, its
    // ECDSA-SHA256 signature in DER, base64.
    const KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEdRVhEiT6bfSM5+7BObE0b+5Os2AA
0LqVJhhY1JiaXX27BBrGHJeHZqJklao0Ghs5MF78uSgOoVFZfcNgTY/+VA==
-----END PUBLIC KEY-----
";
    const OTHER_KEY: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE1fd1OpeotGbks9+B57ZhcVwXerWE
PkBXYnf+QEM+CMPVNDN+sx0OebUpfGZwzUJfDT4USDCnHN/jh+7Tdm6e5A==
-----END PUBLIC KEY-----
";
    const DIGEST: &str = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    const PAYLOAD: &str = r#"{"critical":{"identity":{"docker-reference":"127.0.0.1:5050/channels/x"},"image":{"docker-manifest-digest":"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},"type":"cosign container image signature"},"optional":null}"#;
    const SIGNATURE: &str = "MEYCIQD836j0zU8YgaHvbcjBZzUIvC2+ZUuAt8PfE4V5v1bJFgIhAOM+sjCJ6BUfBoECVx6YKpAF4BL3tdrvN0+k93bs+FXb";

    fn signed(payload: &str, signature: &str) -> Vec<(Vec<u8>, String)> {
        vec![(payload.as_bytes().to_vec(), signature.to_string())]
    }

    #[test]
    fn a_signature_of_the_digest_by_the_key_verifies() {
        let key = PublicKey::from_pem(KEY).unwrap();
        assert_eq!(verify(&key, DIGEST, &signed(PAYLOAD, SIGNATURE)), Ok(()));
        assert_eq!(
            verify(
                &key,
                &DIGEST.to_uppercase().replace("SHA256", "sha256"),
                &signed(PAYLOAD, SIGNATURE)
            ),
            Ok(())
        );
    }

    #[test]
    fn another_key_a_tampered_payload_or_another_digest_fail_and_say_why() {
        let other = PublicKey::from_pem(OTHER_KEY).unwrap();
        let e = verify(&other, DIGEST, &signed(PAYLOAD, SIGNATURE)).unwrap_err();
        assert!(e.to_string().contains("does not match the key"), "{e}");
        let key = PublicKey::from_pem(KEY).unwrap();
        let tampered = PAYLOAD.replace("channels/x", "channels/y");
        let e = verify(&key, DIGEST, &signed(&tampered, SIGNATURE)).unwrap_err();
        assert!(e.to_string().contains("does not match the key"), "{e}");
        let another = format!("sha256:{}", "0".repeat(64));
        let e = verify(&key, &another, &signed(PAYLOAD, SIGNATURE)).unwrap_err();
        assert!(e.to_string().contains("of another digest"), "{e}");
        let e = verify(&key, DIGEST, &signed(PAYLOAD, "!!not base64")).unwrap_err();
        assert!(e.to_string().contains("not base64"), "{e}");
        assert!(
            verify(&key, DIGEST, &[]).is_err(),
            "no signature is no verification"
        );
    }

    #[test]
    fn one_good_signature_among_bad_ones_verifies() {
        let key = PublicKey::from_pem(KEY).unwrap();
        let mut many = signed(PAYLOAD, "MEUCIQ==");
        many.extend(signed(PAYLOAD, SIGNATURE));
        assert_eq!(verify(&key, DIGEST, &many), Ok(()));
    }

    #[test]
    fn keys_other_than_p256_public_keys_are_refused() {
        for bad in [
            "",
            "not pem",
            &KEY.replace("PUBLIC KEY", "PRIVATE KEY"),
            // An Ed25519 key's SPKI.
            "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----\n",
        ] {
            assert!(PublicKey::from_pem(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_signature_tag_is_the_digest_spelled_as_a_tag() {
        assert_eq!(
            signature_tag(DIGEST).unwrap(),
            "sha256-ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad.sig"
        );
        assert!(signature_tag("sha256:abc").is_err());
        assert!(signature_tag("md5:x").is_err());
    }

    #[test]
    fn a_payload_that_is_not_its_layers_blob_is_not_what_was_signed() {
        let key = PublicKey::from_pem(KEY).unwrap();
        let layer = |payload: &str| SignatureLayer {
            payload_digest: crate::digest::sha256(payload.as_bytes()),
            payload_size: payload.len() as u64,
            signature: SIGNATURE.into(),
        };
        let good = vec![(layer(PAYLOAD), PAYLOAD.as_bytes().to_vec())];
        assert_eq!(verify_read(&key, DIGEST, good), Ok(()));
        // The signed payload, under a layer naming other bytes: left out.
        let swapped = vec![(layer("other"), PAYLOAD.as_bytes().to_vec())];
        assert!(verify_read(&key, DIGEST, swapped).is_err());
        let e = to_read(DIGEST, "reg/x@d", None).unwrap_err();
        assert!(matches!(e, VerifyError::Unsigned(..)), "{e}");
    }

    #[test]
    fn signature_layers_come_from_a_cosign_signature_manifest() {
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
               "config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:cc","size":1}},
               "layers":[
                 {{"mediaType":"{PAYLOAD_MEDIA_TYPE}","digest":"sha256:aa","size":250,
                   "annotations":{{"{SIGNATURE_ANNOTATION}":"{SIGNATURE}"}}}},
                 {{"mediaType":"application/octet-stream","digest":"sha256:bb","size":3}},
                 {{"mediaType":"{PAYLOAD_MEDIA_TYPE}","digest":"sha256:dd","size":3}}
               ]}}"#
        );
        assert_eq!(
            signature_layers(manifest.as_bytes(), DIGEST).unwrap(),
            [SignatureLayer {
                payload_digest: "sha256:aa".into(),
                payload_size: 250,
                signature: SIGNATURE.into(),
            }]
        );
        assert!(signature_layers(br#"{"layers":[]}"#, DIGEST).is_err());
        assert!(signature_layers(b"nope", DIGEST).is_err());
    }
}
