//! Output formats, namespaces and contexts, suspend and resume, completion.

use super::*;

#[test]
fn completion_prints_a_script_for_each_shell() {
    let dir = std::env::temp_dir().join(format!("completion-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (shell, marker) in [
        ("bash", "complete -F _rancheros__operator"),
        ("zsh", "#compdef rancheros-operator"),
        ("fish", "complete -c rancheros-operator"),
    ] {
        let o = run(&["completion", shell]);
        assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
        let script = String::from_utf8(o.stdout).unwrap();
        assert!(
            script.contains(marker),
            "{shell}: no {marker:?} in\n{script}"
        );
        // Every user command is offered, with its flags; the internal one is not.
        for word in [
            "sync",
            "status",
            "suspend",
            "resume",
            "check",
            "--all-namespaces",
        ] {
            assert!(script.contains(word), "{shell}: no {word:?}");
        }
        // The internal subcommand is not offered (its name still shows in a flag's help).
        let offers_display = match shell {
            "bash" => script.contains(" display ") || script.contains("__display"),
            "zsh" => script.contains("'display:") || script.contains("(display)"),
            _ => script.contains("-a \"display\"") || script.contains("subcommand display"),
        };
        assert!(!offers_display, "{shell} offers display:\n{script}");
        if shell == "bash" {
            let file = dir.join("completion.bash");
            std::fs::write(&file, &script).unwrap();
            let syntax = Command::new("bash").arg("-n").arg(&file).output().unwrap();
            assert!(syntax.status.success(), "bash -n: {}", stderr(&syntax));
        }
    }
    assert_eq!(run(&["completion", "powershell-9"]).status.code(), Some(2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn display_is_hidden_from_help_and_still_runs() {
    let o = run(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    for shown in [
        "operator",
        "validate",
        "sync",
        "status",
        "suspend",
        "resume",
        "check",
        "completion",
    ] {
        assert!(
            help.contains(&format!("  {shown} ")),
            "{shown} missing:\n{help}"
        );
    }
    assert!(!help.contains("display"), "{help}");
    let o = run(&["display", "--help"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("--file"), "{}", stdout(&o));
}

#[test]
fn new_usage_errors_exit_2_before_any_cluster() {
    for (args, says) in [
        (
            &["status", "a/b", "-A"][..],
            "cannot be used with --all-namespaces",
        ),
        (&["status", "-o", "xml"], "invalid value 'xml'"),
        (&["sync", "--all", "-A", "a/b"], "cannot be used with"),
        (&["suspend"], "<NAMESPACE/CHANNEL>"),
        (&["resume", "a/b/c"], "write NAMESPACE/CHANNEL"),
        (&["suspend", "--all"], "--namespace"),
        (&["suspend", "a/b", "-n", "c"], "not in --namespace c"),
        (&["check", "-A", "-n", "x"], "cannot be used with"),
        (
            &["check", "--leader-election", "maybe"],
            "invalid value 'maybe'",
        ),
    ] {
        assert_usage_error(args, says);
    }
}

#[tokio::test]
async fn status_and_sync_as_json_and_yaml_carry_the_fields_and_the_changed_names() {
    let t = TestNs::started("cli-output", &[]).await;
    set_data(&t, "v", &[("a", "v1"), ("b", "v1")]).await;
    let synced = t.create_synced("ch", configmap_spec("v"), SYNC).await;
    let status = synced.status.clone().unwrap();
    let target = format!("{}/ch", t.ns);

    for format in ["json", "yaml"] {
        let o = cli(&["status", &target, "-o", format], CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(0), "{format}: {}", stderr(&o));
        let doc = if format == "json" {
            json_out(&o)
        } else {
            yaml_out(&o)
        };
        let channels = doc["channels"].as_array().unwrap();
        assert_eq!(channels.len(), 1, "{doc}");
        let c = &channels[0];
        let keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys.iter()
                .copied()
                .collect::<std::collections::BTreeSet<_>>(),
            [
                "namespace",
                "name",
                "ready",
                "reason",
                "versions",
                "revision",
                "lastSyncTime",
                "nextSyncTime",
                "syncing",
                "message"
            ]
            .into_iter()
            .collect(),
            "{format}: {c}"
        );
        assert_eq!(c["namespace"], json!(t.ns), "{c}");
        assert_eq!(c["name"], "ch");
        assert_eq!(c["ready"], "True");
        assert_eq!(c["reason"], "Synchronized");
        assert_eq!(c["versions"], 2);
        assert_eq!(c["revision"], json!(status.source_revision), "{c}");
        assert_eq!(
            c["lastSyncTime"],
            json!(status.last_synced_time.as_ref().unwrap().0.to_string())
        );
        assert!(c["nextSyncTime"].is_string(), "{c}");
        assert_eq!(c["syncing"], false);
        assert_eq!(c["message"], "synchronized 2 versions (2 created)");
    }

    // What changed, by name, as a document (progress still on stderr, not in it).
    set_data(&t, "v", &[("a", "v2"), ("c", "v1")]).await;
    let o = cli(&["sync", &target, "--wait", "-o", "json"], CLI_LIMIT).await;
    assert_success(&o, &t);
    assert_eq!(
        json_out(&o),
        json!({"channels": [{
            "namespace": t.ns, "name": "ch", "outcome": "synchronized",
            "reason": "Synchronized",
            "message": "synchronized 2 versions (1 created, 1 updated, 1 flagged as no longer in sync)",
            "changes": {"created": ["c"], "updated": ["a"], "flagged": ["b"],
                        "unflagged": [], "deleted": []},
            "includesEarlierSync": false,
            "latestVersion": "a",
        }]})
    );
    // Without --wait, as YAML: requested.
    let o = cli_exit(&["sync", &target, "-o", "yaml"], 0).await;
    let doc = yaml_out(&o);
    assert_eq!(doc["channels"][0]["outcome"], "requested", "{doc}");
    assert_eq!(doc["channels"][0]["changes"], Value::Null, "{doc}");
    t.cleanup().await;
}

#[tokio::test]
async fn a_failed_sync_as_json_exits_1_with_its_reason_in_the_document_and_on_stderr() {
    let t = TestNs::new("cli-output-fail").await;
    let mut spec = configmap_spec("v");
    spec["suspend"] = json!(true);
    t.create_channel("ch", spec).await;
    let o = cli_exit(&["sync", "--all", "-n", &t.ns, "--wait", "-o", "json"], 1).await;
    let doc = json_out(&o);
    assert_eq!(doc["channels"][0]["outcome"], "failed", "{doc}");
    assert_eq!(doc["channels"][0]["reason"], "Suspended", "{doc}");
    assert_eq!(error_lines(&o).len(), 1, "{}", stderr(&o));
    t.cleanup().await;
}

/// A copy of the test's kubeconfig with two more contexts on the same cluster and user:
/// `here` (namespace `ns`, the current context) and `elsewhere` (namespace `other`).
fn kubeconfig_with_contexts(dir: &std::path::Path, ns: &str, other: &str) -> std::path::PathBuf {
    // The file as it is (YAML, read as JSON values): every credential kept verbatim.
    let path = std::env::var("KUBECONFIG").unwrap();
    let mut config: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let current = config["current-context"].as_str().unwrap().to_string();
    let base = config["contexts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == current.as_str())
        .map(|c| c["context"].clone())
        .unwrap();
    let contexts = config["contexts"].as_array_mut().unwrap();
    for (name, namespace) in [("here", ns), ("elsewhere", other)] {
        let mut context = base.clone();
        context["namespace"] = json!(namespace);
        contexts.push(json!({"name": name, "context": context}));
    }
    config["current-context"] = json!("here");
    let path = dir.join("kubeconfig");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

fn channel_names(doc: &Value) -> Vec<String> {
    doc["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}/{}",
                c["namespace"].as_str().unwrap(),
                c["name"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn namespaces_come_from_n_a_or_the_context_and_context_picks_one() {
    let t = TestNs::new("cli-contexts").await;
    let other = TestNs::new("cli-contexts-other").await;
    t.create_channel("mine", configmap_spec("v")).await;
    other.create_channel("theirs", configmap_spec("v")).await;
    let dir = std::env::temp_dir().join(format!("cli-contexts-{}", t.ns));
    std::fs::create_dir_all(&dir).unwrap();
    let kc = kubeconfig_with_contexts(&dir, &t.ns, &other.ns);
    let kc = kc.to_str().unwrap();
    let (mine, theirs) = (format!("{}/mine", t.ns), format!("{}/theirs", other.ns));

    let listed = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = cli(&args, CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        channel_names(&json_out(&o))
    };
    let base = |extra: &[&str]| {
        let mut a: Vec<String> = ["status", "-o", "json", "--kubeconfig", kc]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    // The current context's namespace, another context's, -n over the context's.
    assert_eq!(listed(base(&[])).await, vec![mine.to_string()]);
    assert_eq!(
        listed(base(&["--context", "elsewhere"])).await,
        vec![theirs.to_string()]
    );
    assert_eq!(
        listed(base(&["--context", "elsewhere", "-n", &t.ns])).await,
        vec![mine.to_string()]
    );
    // A bare channel name is looked up in the context's namespace.
    assert_eq!(
        listed(base(&["--context", "elsewhere", "theirs"])).await,
        vec![theirs.to_string()]
    );
    // -A: both (and maybe other tests' channels).
    let all = listed(base(&["-A"])).await;
    assert!(all.contains(&mine) && all.contains(&theirs), "{all:?}");
    // suspend follows the same rules.
    let o = cli(
        &[
            "suspend",
            "theirs",
            "--kubeconfig",
            kc,
            "--context",
            "elsewhere",
        ],
        CLI_LIMIT,
    )
    .await;
    assert_eq!(
        stdout(&o),
        format!("{theirs}: suspended\n"),
        "{}",
        stderr(&o)
    );
    assert_eq!(other.channel("theirs").await.spec.suspend, Some(true));

    let o = cli(
        &["status", "--kubeconfig", kc, "--context", "nowhere"],
        CLI_LIMIT,
    )
    .await;
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error: cannot load the Kubernetes client configuration")
            && stderr(&o).contains("the kubeconfig has no context nowhere (it has: ")
            && stderr(&o).contains("elsewhere"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
    other.cleanup().await;
    t.cleanup().await;
}

#[tokio::test]
async fn suspend_and_resume_set_spec_suspend() {
    let t = TestNs::new("cli-suspend").await;
    t.create_channel("ch", configmap_spec("v")).await;
    t.create_channel("other", configmap_spec("v")).await;
    let target = format!("{}/ch", t.ns);
    let suspend = |ch: rancheros_operator::api::ManagedOSVersionChannel| ch.spec.suspend;

    let o = cli_exit(&["suspend", &target], 0).await;
    assert_eq!(stdout(&o), format!("{target}: suspended\n"));
    assert_eq!(suspend(t.channel("ch").await), Some(true));
    assert_eq!(suspend(t.channel("other").await), None);
    let o = cli(&["suspend", &target], CLI_LIMIT).await;
    assert_eq!(stdout(&o), format!("{target}: already suspended\n"));

    let o = cli_exit(&["resume", &target, "-o", "json"], 0).await;
    assert_eq!(
        json_out(&o),
        json!({"channels": [{"namespace": t.ns, "name": "ch", "suspend": false, "changed": true}]})
    );
    assert_eq!(suspend(t.channel("ch").await), Some(false));

    // Every channel of the namespace.
    let o = cli_exit(&["suspend", "--all", "-n", &t.ns, "-o", "yaml"], 0).await;
    let doc = yaml_out(&o);
    assert_eq!(
        channel_names(&doc),
        [target.clone(), format!("{}/other", t.ns)]
    );
    assert!(
        doc["channels"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["changed"] == true),
        "{doc}"
    );
    assert_eq!(suspend(t.channel("other").await), Some(true));

    let missing = format!("{}/nope", t.ns);
    for verb in ["suspend", "resume"] {
        let o = cli(&[verb, &missing], CLI_LIMIT).await;
        assert_eq!(o.status.code(), Some(1), "{verb}: {}", stderr(&o));
        assert_eq!(
            stderr(&o),
            format!("error: channel {missing} not found\n"),
            "{verb}"
        );
    }
    t.cleanup().await;
}
