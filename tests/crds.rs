//! `crds/` must hold exactly what the Rust types generate (`rancheros_operator::crds`).
//! Regenerate with `UPDATE_CRDS=1 cargo test --test integration crds:: && UPDATE_CRDS=1 cargo test --test integration chart_render::`.

use std::path::Path;

#[test]
fn crds_directory_matches_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    for (file, yaml) in rancheros_operator::crds::manifests().unwrap() {
        let path = dir.join(file);
        if update {
            std::fs::write(&path, &yaml).unwrap();
            continue;
        }
        let on_disk = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        assert!(
            on_disk == yaml,
            "{} is out of date with the types in src/api.rs; run `UPDATE_CRDS=1 cargo test --test integration crds:: && UPDATE_CRDS=1 cargo test --test integration chart_render::`",
            path.display()
        );
    }
}
