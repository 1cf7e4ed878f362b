//! The chart as files: its CRDs, lint, the schemas its manifests must pass, and the package.

use super::*;

#[test]
fn chart_crds_are_the_crds_directory() {
    let update = std::env::var_os("UPDATE_CRDS").is_some();
    let ours = root().join("crds");
    let chart = chart_dir().join("crds");
    let names = |dir: &Path| -> BTreeSet<String> {
        std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    };
    for name in names(&ours) {
        let want = std::fs::read(ours.join(&name)).unwrap();
        let path = chart.join(&name);
        if update {
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        assert!(
            std::fs::read(&path).ok().as_ref() == Some(&want),
            "{} differs from crds/{name}; run `UPDATE_CRDS=1 cargo test --test integration crds:: && UPDATE_CRDS=1 cargo test --test integration chart_render::`",
            path.display()
        );
    }
    if update {
        for stale in names(&chart).difference(&names(&ours)) {
            std::fs::remove_file(chart.join(stale)).unwrap();
        }
    }
    assert_eq!(
        names(&chart),
        names(&ours),
        "{CHART}/crds must hold exactly the files of crds/"
    );
}

#[test]
fn helm_lint_strict_passes_with_default_and_ci_values() {
    run(command("helm").args(["lint", "--strict"]).arg(chart_dir()));
    for values in ci_values() {
        run(command("helm")
            .args(["lint", "--strict"])
            .arg(chart_dir())
            .arg("--values")
            .arg(&values));
    }
}

/// `helm template --output-dir` with the given values: the rendered files.
fn render_to_dir(name: &str, args: &[&str]) -> (PathBuf, Vec<PathBuf>) {
    let dir = temp_dir(name);
    run(helm_template(args).arg("--output-dir").arg(&dir));
    let files = files_under(vec![dir.clone()]);
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("templates/deployment.yaml"))
            && files
                .iter()
                .any(|f| f.ends_with("crds/managedosversions.yaml")),
        "unexpected rendering: {files:?}"
    );
    (dir, files)
}

#[test]
fn rendered_manifests_pass_kubernetes_schemas_and_yamllint() {
    let config = root().join("charts/.yamllint.yaml");
    let mut cases: Vec<(String, Vec<String>)> = vec![("default".into(), vec![])];
    for values in ci_values() {
        let name = values.file_stem().unwrap().to_string_lossy().into_owned();
        cases.push((name, vec!["--values".into(), values.display().to_string()]));
    }
    for (name, args) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (dir, files) = render_to_dir(name, &args);
        for version in SCHEMA_VERSIONS {
            let out = run(command("kubernetes-validate")
                .args(["--strict", "--kubernetes-version", version])
                .args(&files));
            // Only the Prometheus Operator's kinds have no schema here; every other object
            // must have been checked.
            for line in out.lines().filter(|l| !l.starts_with("INFO")) {
                assert!(
                    line.contains("Couldn't find schema for kind ServiceMonitor")
                        || line.contains("Couldn't find schema for kind PrometheusRule"),
                    "{name}, Kubernetes {version}: {line}\n{out}"
                );
            }
            assert!(out.contains("passed for resource deployment/"), "{out}");
        }
        // The templates' output; the CRDs are linted as the chart's files below (helm's
        // --output-dir adds a blank line at their end).
        run(command("yamllint")
            .args(["--strict", "--config-file"])
            .arg(&config)
            .arg(dir.join("rancheros-operator/templates")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
    // The chart's own YAML files too.
    let chart = chart_dir();
    run(command("yamllint")
        .args(["--strict", "--config-file"])
        .arg(&config)
        .arg(chart.join("Chart.yaml"))
        .arg(chart.join("values.yaml"))
        .arg(chart.join("ci"))
        .arg(chart.join("crds"))
        .arg(chart.join("files")));
}

#[test]
fn packaged_chart_carries_the_crds_and_not_the_ci_values() {
    let dir = temp_dir("package");
    run(command("helm")
        .arg("package")
        .arg(chart_dir())
        .arg("--destination")
        .arg(&dir));
    let tgz = dir.join(format!("rancheros-operator-{}.tgz", chart_version()));
    let listing = run(Command::new("tar").arg("-tzf").arg(&tgz));
    for file in [
        "rancheros-operator/Chart.yaml",
        "rancheros-operator/values.yaml",
        "rancheros-operator/values.schema.json",
        "rancheros-operator/templates/NOTES.txt",
        "rancheros-operator/files/rbac.yaml",
        "rancheros-operator/files/dashboard.json",
        "rancheros-operator/crds/managedosversionchannels.yaml",
        "rancheros-operator/crds/managedosversions.yaml",
    ] {
        assert!(
            listing.lines().any(|l| l == file),
            "{file} not in {listing}"
        );
    }
    assert!(!listing.contains("/ci/"), "{listing}");
    // The packaged chart renders like the directory.
    let from_tgz = run(command("helm").args(["template", "rel"]).arg(&tgz).args([
        "--namespace",
        "ops",
        "--include-crds",
        "--kube-version",
        "1.33.0",
    ]));
    assert_eq!(from_tgz, run(&mut helm_template(&[])));
    std::fs::remove_dir_all(&dir).unwrap();
}
