//! Platforms (`os/architecture[/variant]`): as image indexes list them, as the operator
//! and `--platform` name one, and as people and channel files write them. Below `config`
//! (an oci channel's platform), `policy` (`spec.versions.platforms`) and `registry`.

use std::fmt;

/// An architecture as images name it, from the kernel's name of it (`uname -m`); any
/// other name as it is.
fn oci_architecture(name: &str) -> &str {
    match name {
        "x86_64" | "x86-64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// `os/architecture[/variant]`, as an image index lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    pub variant: Option<String>,
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        match &self.variant {
            Some(v) => write!(f, "/{v}"),
            None => Ok(()),
        }
    }
}

impl Platform {
    /// `linux/<the operator's architecture>`, in the names images use.
    pub fn host() -> Platform {
        let architecture = match std::env::consts::ARCH {
            "powerpc64" => "ppc64le",
            "x86" => "386",
            other => oci_architecture(other),
        };
        Platform {
            os: "linux".into(),
            architecture: architecture.into(),
            variant: None,
        }
    }

    /// A platform as people and channel files write it (`spec.versions.platforms`, an
    /// entry's `platforms`): `os/arch[/variant]` in any case, the kernel's names of the
    /// architectures taken as the images' (`x86_64` is `amd64`), lowercase; `None` without
    /// an os or an architecture.
    pub fn loose(text: &str) -> Option<Platform> {
        let mut parts = text.trim().split('/');
        let os = parts.next().filter(|s| !s.is_empty())?;
        let arch = parts.next().filter(|s| !s.is_empty())?.to_ascii_lowercase();
        Some(Platform {
            os: os.to_ascii_lowercase(),
            architecture: oci_architecture(&arch).to_string(),
            variant: parts.next().filter(|s| !s.is_empty()).map(str::to_string),
        })
    }

    /// Whether both name the same os and architecture (the variant not compared).
    pub fn same_machine(&self, other: &Platform) -> bool {
        self.os == other.os && self.architecture == other.architecture
    }

    /// Strictly `os/architecture[/variant]`, each part letters and digits; `Err` says why
    /// (the caller names its field or flag before it).
    pub fn parse(text: &str) -> Result<Platform, String> {
        let parts: Vec<&str> = text.trim().split('/').collect();
        let ok = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric());
        match parts.as_slice() {
            [os, arch] if ok(os) && ok(arch) => Ok(Platform {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: None,
            }),
            [os, arch, variant] if ok(os) && ok(arch) && ok(variant) => Ok(Platform {
                os: os.to_string(),
                architecture: arch.to_string(),
                variant: Some(variant.to_string()),
            }),
            _ => Err(format!(
                "{text:?} is not os/architecture[/variant] (like linux/amd64)"
            )),
        }
    }
}
