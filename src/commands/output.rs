//! `-o text|json|yaml`, the output format of every command that reports (`sync`, `status`,
//! `check`, ..., `validate`, `mirror`): text (lines and tables) for people, documents for
//! scripts. A document is printed whole, once the command knows everything it reports
//! (json: pretty-printed; `status --watch`: one compact JSON object per line, one YAML
//! document per `---`).

use serde::Serialize;

/// The one output format type. Its people's format is `text`, also spelled `table` (the
/// cluster commands' name for it); every command's flag is `-o`/`--output`, also spelled
/// `--format` (`validate`'s first spelling).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    #[default]
    #[value(alias = "table")]
    Text,
    Json,
    Yaml,
}

impl Format {
    /// Whether the output is a document for scripts.
    pub fn is_document(self) -> bool {
        self != Format::Text
    }
}

/// `doc` as `format` (json or yaml), ending with a newline; `stream`: one of several
/// documents (json on one line, yaml after a `---` line).
pub fn document(format: Format, doc: &impl Serialize, stream: bool) -> String {
    // The documents are plain data (strings, numbers, lists): serializing cannot fail.
    let mut text = match (format, stream) {
        (Format::Yaml, _) => {
            let body = serde_json::to_value(doc)
                .ok()
                .and_then(|v| serde_saphyr::to_string(&v).ok())
                .unwrap_or_default();
            if stream { format!("---\n{body}") } else { body }
        }
        (_, true) => serde_json::to_string(doc).unwrap_or_default(),
        (_, false) => serde_json::to_string_pretty(doc).unwrap_or_default(),
    };
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// One type behind `-o` everywhere, each command's old spelling of the flag and of the
    /// people's format still taken.
    #[test]
    fn every_command_takes_one_format_by_every_spelling() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cluster {
            #[command(flatten)]
            args: crate::commands::cluster::ClusterArgs,
        }
        #[derive(Parser)]
        struct Mirror {
            #[command(flatten)]
            args: crate::commands::mirror::MirrorArgs,
        }
        let cluster = |a: &[&str]| {
            Cluster::try_parse_from([&["x"], a].concat())
                .unwrap()
                .args
                .output
        };
        assert_eq!(cluster(&[]), Format::Text);
        assert_eq!(cluster(&["-o", "table"]), Format::Text);
        assert_eq!(cluster(&["--output", "text"]), Format::Text);
        assert_eq!(cluster(&["--format", "yaml"]), Format::Yaml);
        let mirror = |a: &[&str]| {
            Mirror::try_parse_from([&["x", "src", "--to", "dir:d"], a].concat())
                .unwrap()
                .args
                .output
        };
        assert_eq!(mirror(&[]), Format::Text);
        assert_eq!(mirror(&["-o", "json"]), Format::Json);
        assert_eq!(mirror(&["--format", "yaml"]), Format::Yaml);
        assert_eq!(mirror(&["-o", "table"]), Format::Text);
        assert!(Cluster::try_parse_from(["x", "-o", "xml"]).is_err());
    }

    #[test]
    fn json_and_yaml_carry_the_same_data() {
        let doc = json!({"channels": [{"name": "a", "versions": 2, "reason": null,
                                       "changes": {"created": ["x", "y"]}}]});
        for stream in [false, true] {
            let j = document(Format::Json, &doc, stream);
            assert_eq!(serde_json::from_str::<serde_json::Value>(&j).unwrap(), doc);
            assert_eq!(j.lines().count() == 1, stream, "{j}");
            let y = document(Format::Yaml, &doc, stream);
            assert_eq!(y.starts_with("---\n"), stream, "{y}");
            let back: serde_json::Value =
                serde_saphyr::from_str(y.trim_start_matches("---\n")).unwrap();
            assert_eq!(back, doc, "{y}");
        }
    }
}
