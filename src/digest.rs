//! Content digests (`<algorithm>:<hex>`) as OCI names them: computed, checked, compared.
//! Below `registry` and `cosign`, which both name content by digest.

/// The tags named after a digest (`<algorithm>-<hex>`, the `:` a tag cannot hold made a
/// `-`), where a registry keeps what refers to an image: the OCI referrers tag (for
/// registries without the referrers API) and cosign's signature, attestation and SBOM tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DigestTag {
    /// `sha256-<hex>`
    Referrers,
    /// `sha256-<hex>.sig`
    Signature,
    /// `sha256-<hex>.att`
    Attestation,
    /// `sha256-<hex>.sbom`
    Sbom,
}

impl DigestTag {
    /// Cosign's three tags.
    pub const COSIGN: [DigestTag; 3] = [
        DigestTag::Signature,
        DigestTag::Attestation,
        DigestTag::Sbom,
    ];

    fn suffix(self) -> &'static str {
        match self {
            DigestTag::Referrers => "",
            DigestTag::Signature => ".sig",
            DigestTag::Attestation => ".att",
            DigestTag::Sbom => ".sbom",
        }
    }

    /// The tag of this kind for `digest` (`<algorithm>:<hex>`).
    pub fn of(self, digest: &str) -> String {
        format!("{}{}", digest.replacen(':', "-", 1), self.suffix())
    }

    /// The sha256 digest a tag of this kind is named after; `None`: not such a tag.
    pub fn digest_in(self, tag: &str) -> Option<String> {
        let hex = tag.strip_prefix("sha256-")?.strip_suffix(self.suffix())?;
        Some(format!("sha256:{hex}"))
    }
}

/// The digest (`sha256:<hex>`) of bytes.
pub fn sha256(data: &[u8]) -> String {
    Algorithm::Sha256.digest(data)
}

/// The first `bytes` bytes of the SHA-256 of `data`, in hex: a short content hash for names
/// and validators (a version's content hash, an ETag, a ConfigMap name), not a digest to
/// check content by.
pub fn sha256_hex_prefix(data: &[u8], bytes: usize) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    digest
        .as_ref()
        .iter()
        .take(bytes)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The digest algorithms a descriptor may name and this client verifies: the two the OCI
/// image spec registers. Any other is refused, never skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Sha256,
    Sha512,
}

impl Algorithm {
    /// The algorithm `digest` (`<algorithm>:<hex>`) names; `None`: none of these.
    pub fn of(digest: &str) -> Option<Algorithm> {
        match digest.split_once(':')?.0 {
            "sha256" => Some(Algorithm::Sha256),
            "sha512" => Some(Algorithm::Sha512),
            _ => None,
        }
    }

    /// The algorithm of a well-formed `digest`: one of these, and lowercase hex of its
    /// length (a digest from elsewhere goes into URLs and file names).
    pub fn checked(digest: &str) -> Option<Algorithm> {
        let (_, hex) = digest.split_once(':')?;
        let algorithm = Algorithm::of(digest)?;
        let len = match algorithm {
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        };
        let ok = hex.len() == len
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        ok.then_some(algorithm)
    }

    pub fn ring(self) -> &'static ring::digest::Algorithm {
        match self {
            Algorithm::Sha256 => &ring::digest::SHA256,
            Algorithm::Sha512 => &ring::digest::SHA512,
        }
    }

    /// `<algorithm>:<hex>` of a finished hash of this algorithm.
    pub fn name(self, hash: &ring::digest::Digest) -> String {
        let prefix = match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        };
        let hex: String = hash.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        format!("{prefix}:{hex}")
    }

    pub fn digest(self, data: &[u8]) -> String {
        self.name(&ring::digest::digest(self.ring(), data))
    }
}

/// Whether `data` is what `expected` names; `None`: `expected` names an algorithm this
/// client does not verify.
pub fn matches(expected: &str, data: &[u8]) -> Option<bool> {
    Algorithm::of(expected).map(|a| a.digest(data) == expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tags_of_a_digest_spell_it_with_a_dash() {
        let d = sha256(b"x");
        let flat = format!("sha256-{}", d.strip_prefix("sha256:").unwrap());
        assert_eq!(DigestTag::Referrers.of(&d), flat);
        assert_eq!(
            DigestTag::COSIGN.map(|t| t.of("sha256:ab")),
            ["sha256-ab.sig", "sha256-ab.att", "sha256-ab.sbom"]
        );
        for t in DigestTag::COSIGN {
            assert_eq!(t.digest_in(&t.of(&d)), Some(d.clone()));
        }
        assert_eq!(DigestTag::Signature.digest_in("sha256-ab.att"), None);
        assert_eq!(DigestTag::Signature.digest_in("v1.sig"), None);
    }
}
