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
        // (`cluster`: a cluster command's line; `mirror`: mirror's, after SOURCE and DEST)
        for (line, format) in [
            (&["cluster"][..], Some(Format::Text)),
            (&["cluster", "-o", "table"], Some(Format::Text)),
            (&["cluster", "--output", "text"], Some(Format::Text)),
            (&["cluster", "--format", "yaml"], Some(Format::Yaml)),
            (&["cluster", "-o", "xml"], None),
            (&["mirror"], Some(Format::Text)),
            (&["mirror", "-o", "json"], Some(Format::Json)),
            (&["mirror", "--format", "yaml"], Some(Format::Yaml)),
            (&["mirror", "-o", "table"], Some(Format::Text)),
        ] {
            let parsed = match line.split_first() {
                Some((&"mirror", rest)) => {
                    Mirror::try_parse_from([&["mirror", "src", "--to", "dir:d"], rest].concat())
                        .map(|m| m.args.output)
                }
                _ => Cluster::try_parse_from(line).map(|c| c.args.output),
            };
            assert_eq!(parsed.ok(), format, "{line:?}");
        }
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
